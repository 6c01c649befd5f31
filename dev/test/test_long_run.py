"""The long-run features of the CPU trainer end to end (the CUDA trainer shares their code:
llmc/train/checkpoint_retention.h, llmc/train/outlier_detector.h, llmc/data/hellaswag.h):

- -nk / -nm: which checkpoints remain; a deletion interrupted by a crash is finished at the next start;
- -sl / -sg: a constructed loss / gradient spike after the 128-step window is full skips exactly that
  update (none while the window fills), and the skip leaves parameters, AdamW moments and step count
  untouched: the run ends bit-identical to a run on the same data without the spike batch;
- -h 1: HellaSwag accuracy on a small eval file in llm.c's format equals an independent numpy
  float64 computation from the checkpoint the run writes; malformed eval files are refused.

Every run uses its own small token shards (no Tiny Shakespeare needed) and a tiny model (L=1, C=32)
on one thread (OpenMP threads spinning on a busy 2-core machine cost 10x). The binary comes from
$TRAIN_GPT2 (set by `make test`), else build/cpu/train_gpt2."""
import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("TRAIN_GPT2", REPO / "build" / "cpu" / "train_gpt2"))
pytestmark = pytest.mark.skipif(not BIN.exists(), reason="needs build/cpu/train_gpt2")

TINY = ["-e", "d1,c32,h2,t64", "-tk", "/nonexistent/tokenizer.bin", "-s", "0", "-threads", "1"]


def write_shard(path, tokens):
    tokens = np.asarray(tokens, dtype=np.uint16)
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    Path(path).write_bytes(header.tobytes() + tokens.astype("<u2").tobytes())
    return str(path)


def run(*args, check=True):
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    if check and p.returncode != 0:
        raise AssertionError(f"train_gpt2 failed ({p.returncode}):\n{out[-3000:]}")
    return p.returncode, out


def model_steps(folder):
    return sorted(int(m.group(1)) for f in Path(folder).iterdir() if (m := re.fullmatch(r"model_(\d{8})\.bin", f.name)))


# ---------------------------------------------------------------- -nk / -nm

@pytest.fixture(scope="module")
def random_shard(tmp_path_factory):
    rng = np.random.default_rng(0)
    return write_shard(tmp_path_factory.mktemp("data") / "random.bin", rng.integers(0, 50257, 20000))


def test_retention_keeps_the_newest_and_the_major_checkpoints(tmp_path, random_shard):
    out = tmp_path / "run"
    _, text = run(*TINY, "-i", random_shard, "-v", "0", "-b", "1", "-t", "16", "-x", "14", "-n", "2", "-nk", "2", "-nm", "6", "-o", out)
    assert model_steps(out) == [6, 12, 14]          # the newest 2 (12, 14) and the multiples of 6 (6, 12)
    assert [int(s) for s in re.findall(r"deleted checkpoint (\d+)", text)] == [2, 4, 8, 10]
    assert not list(out.glob("delete_*")) and not list(out.glob("*.tmp"))
    # without -nk everything stays
    out2 = tmp_path / "all"
    run(*TINY, "-i", random_shard, "-v", "0", "-b", "1", "-t", "16", "-x", "6", "-n", "2", "-o", out2)
    assert model_steps(out2) == [2, 4, 6]


def test_an_interrupted_deletion_is_finished_at_the_next_start(tmp_path, random_shard):
    out = tmp_path / "run"
    run(*TINY, "-i", random_shard, "-v", "0", "-b", "1", "-t", "16", "-x", "4", "-n", "2", "-o", out)
    assert model_steps(out) == [2, 4]
    # a crash while deleting checkpoint 2: its marker is on disk, the model file already gone, a
    # state file of a CUDA run still there; and a marker whose files are all still present (4)
    (out / "model_00000002.bin").unlink()
    (out / "state_00000002.bin").write_bytes(b"x")
    (out / "delete_00000002.pending").write_text("model_00000002.bin\nstate_00000002.bin\n")
    (out / "delete_00000004.pending").write_text("model_00000004.bin\n")
    (out / "delete_00000006.pending.tmp").write_text("model_00000006.bin\n")  # never committed: ignored
    keep = tmp_path / "unrelated.bin"
    keep.write_bytes(b"y")
    _, text = run(*TINY, "-i", random_shard, "-v", "0", "-b", "1", "-t", "16", "-x", "1", "-o", out)
    assert "finished deleting checkpoint 2" in text and "finished deleting checkpoint 4" in text
    assert not (out / "state_00000002.bin").exists() and not list(out.glob("delete_*"))
    assert model_steps(out) == [1]                   # 4 finished deleting; 1 written by this run
    # a marker naming a file outside its checkpoint stops the run before anything is deleted
    (out / "delete_00000001.pending").write_text("main.log\n")
    code, text = run(*TINY, "-i", random_shard, "-v", "0", "-b", "1", "-t", "16", "-x", "1", "-o", out, check=False)
    assert code == 1 and "error:" in text and "delete_00000001.pending" in text
    assert (out / "main.log").exists() and (out / "model_00000001.bin").exists()


# ---------------------------------------------------------------- -sl / -sg

B, T, SPIKE_EARLY, SPIKE = 1, 16, 50, 140   # 0-based steps of the spike batches; the window is 128


def spike_data(folder, with_late_spike, with_early_spike=True):
    """A periodic token stream (every batch the same: the loss falls steadily) with a batch of random
    tokens at step SPIKE_EARLY (window still filling: not skipped) and, optionally, at step SPIKE."""
    steps = 160
    period = np.arange(100, 116)
    tokens = np.tile(period, (steps * B * T + 1) // 16 + 2)[: steps * B * T + 1].copy()
    rng = np.random.default_rng(1)
    spikes = ([SPIKE_EARLY] if with_early_spike else []) + ([SPIKE] if with_late_spike else [])
    for s in spikes:  # (a batch's first input is the last target of the batch before, and its last target
        #               the next batch's first input: both stay periodic, so only this batch changes)
        tokens[s * B * T + 1: (s + 1) * B * T] = rng.integers(20000, 50257, B * T - 1)
    if not with_late_spike:  # the same stream without the batch of step SPIKE: steps after it shift by one
        tokens = np.concatenate([tokens[: SPIKE * B * T], tokens[(SPIKE + 1) * B * T:]])
    return write_shard(Path(folder) / f"spike_{int(with_early_spike)}{int(with_late_spike)}.bin", tokens)


def skipped_steps(text):
    return [(int(s), why) for s, why in re.findall(r"step\s+(\d+)/\d+ \|.*\| skipped \((loss|grad) z=", text)]


@pytest.fixture(scope="module")
def spike_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("spike")
    with_spike, without, late_only = spike_data(d, True), spike_data(d, False), spike_data(d, True, with_early_spike=False)
    common = [*TINY, "-v", "0", "-b", B, "-t", T, "-k", "constant", "-l", "1e-2", "-c", "0.1"]
    runs = {}
    # (-sg: without the early spike, whose gradient norm (larger than the late one's) would stay in the window)
    for name, data, steps, extra in [("sl", with_spike, 150, ["-sl", "5"]), ("sg", late_only, 150, ["-sg", "5"]),
                                     ("off", with_spike, 150, []), ("clean", without, 149, ["-sl", "5", "-sg", "5"])]:
        out = d / name
        _, text = run(*common, "-i", data, "-x", steps, "-o", out, *extra)
        runs[name] = (out, text)
    return runs


def test_a_loss_spike_skips_exactly_its_update(spike_runs):
    out, text = spike_runs["sl"]
    assert skipped_steps(text) == [(SPIKE + 1, "loss")]            # not the early spike: the window was filling
    z = float(re.search(r"skipped \(loss z=([0-9.]+)\)", text).group(1))
    assert z > 5
    log = (out / "main.log").read_text()
    assert re.search(rf"^s:{SPIKE + 1} trl:\S+ lr:\S+ norm:\S+ skipped:loss_z=[0-9.]+$", log, re.M)
    assert log.count("skipped:") == 1
    assert "1 updates skipped" in text


def test_a_gradient_spike_skips_with_sg(spike_runs):
    _, text = spike_runs["sg"]
    assert skipped_steps(text) == [(SPIKE + 1, "grad")]
    _, off = spike_runs["off"]
    assert skipped_steps(off) == []                                 # thresholds 0: off


def test_the_skip_leaves_parameters_moments_and_step_count_untouched(spike_runs):
    """Skipping the spike's update is training on the data without the spike batch: with a constant
    learning rate the runs end bit-identical (AdamW's moments and bias correction included)."""
    sl_out, _ = spike_runs["sl"]
    clean_out, clean_text = spike_runs["clean"]
    assert skipped_steps(clean_text) == []
    a = (sl_out / "model_00000150.bin").read_bytes()
    b = (clean_out / "model_00000149.bin").read_bytes()
    assert a == b
    off_out, _ = spike_runs["off"]
    assert (off_out / "model_00000150.bin").read_bytes() != a      # the spike's update does change the model


# ---------------------------------------------------------------- -h 1 (HellaSwag)

def write_eval(path, examples, magic=20240522, version=1, patch=None):
    """llm.c's eval file (dev/data/data_common.py write_evalfile): examples are (label, ctx, [4 endings])."""
    stream, longest = [], 0
    for i, (label, ctx, endings) in enumerate(examples):
        ex = [65535, 0, i, label, len(endings), len(ctx), *ctx]
        for e in endings:
            ex += [len(e), *e]
        ex[1] = 2 * len(ex)
        longest = max(longest, 2 * len(ex))
        stream += ex
    header = np.zeros(256, dtype="<i4")
    header[:4] = [magic, version, len(examples), longest]
    words = np.array(stream, dtype="<u2")
    if patch:
        patch(header, words)
    Path(path).write_bytes(header.tobytes() + words.tobytes())
    return str(path)


def make_examples(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ctx = rng.integers(0, 2000, rng.integers(3, 12)).tolist()
        endings = [rng.integers(0, 2000, rng.integers(1, 6)).tolist() for _ in range(4)]
        out.append((int(rng.integers(0, 4)), ctx, endings))
    return out


def read_model(path):
    """(config, parameter arrays in float64) of a version 3 checkpoint (doc/FORMATS.md)."""
    raw = Path(path).read_bytes()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    assert head[0] == 20240326 and head[1] == 3
    maxT, V, L, NH, C, Vp = (int(x) for x in head[2:8])
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    flat = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    params, pos = [], 0
    for sh in shapes:
        n = math.prod(sh)
        params.append(flat[pos:pos + n].reshape(sh))
        pos += n
    assert pos == len(flat)
    return dict(V=V, NH=NH), params


def losses_of(cfg, params, seq):
    """Per-position cross-entropy of GPT-2 (float64 numpy) on inputs seq[:-1], targets seq[1:]."""
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = params
    idx, tgt = np.array(seq[:-1]), np.array(seq[1:])
    T, C, NH = len(idx), wte.shape[1], cfg["NH"]

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    x = wte[idx] + wpe[:T]
    for l in range(ln1w.shape[0]):
        qkv = ln(x, ln1w[l], ln1b[l]) @ qkvw[l].T + qkvb[l]
        q, k, v = (a.reshape(T, NH, C // NH).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        att = q @ k.transpose(0, 2, 1) / math.sqrt(C // NH)
        att = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + (att @ v).transpose(1, 0, 2).reshape(T, C) @ apw[l].T + apb[l]
        u = ln(x, ln2w[l], ln2b[l]) @ fcw[l].T + fcb[l]
        u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        x = x + u @ fpw[l].T + fpb[l]
    logits = (ln(x, lnfw, lnfb) @ wte.T)[:, : cfg["V"]]
    m = logits.max(-1, keepdims=True)
    logz = m[:, 0] + np.log(np.exp(logits - m).sum(-1))
    return logz - logits[np.arange(T), tgt]


def reference_choices(model_path, examples):
    """The completion of lowest mean loss per example, and the margin to the second best, from the
    checkpoint in float64 (an implementation of the model independent of the trainer's)."""
    cfg, params = read_model(model_path)
    choices, margins = [], []
    for _, ctx, endings in examples:
        means = [losses_of(cfg, params, ctx + e)[len(ctx) - 1:].mean() for e in endings]  # the completion tokens' targets
        order = np.argsort(means, kind="stable")
        choices.append(int(order[0]))
        margins.append(means[order[1]] - means[order[0]])
    return choices, margins


def hellaswag_result(text):
    m = re.findall(r"step\s+(\d+) \| hellaswag acc (\d+)/(\d+) = ([0-9.]+)", text)
    return [(int(s), int(c), int(n), float(a)) for s, c, n, a in m]


def test_hellaswag_accuracy_matches_an_independent_computation(tmp_path, random_shard):
    examples = make_examples(7, seed=3)
    evalf = write_eval(tmp_path / "hellaswag_val.bin", examples)
    out = tmp_path / "run"
    common = [*TINY, "-i", random_shard, "-j", random_shard, "-b", "8", "-t", "32", "-m", "1", "-u", "0", "-h", "1", "-hf", evalf]
    _, text = run(*common, "-x", "2", "-v", "2", "-l", "1e-2", "-o", out)
    res = hellaswag_result(text)
    assert [r[0] for r in res] == [2] and res[0][2] == 7            # evaluated at step 2 (not step 0), 7 examples
    choices, margins = reference_choices(out / "model_00000002.bin", examples)
    assert min(margins) > 1e-5, margins                             # float32 vs float64 cannot flip a choice
    expected = sum(int(c == ex[0]) for c, ex in zip(choices, examples))
    assert 0 < expected < 7, "choose another seed: the labels should be neither all right nor all wrong"
    assert res[0][1] == expected
    assert f"s:2 eval:{expected / 7:.4f}" in (out / "main.log").read_text()
    # the same model (-l 0: the one step changes nothing) with the labels set to the choices: 7/7,
    # and to other completions: 0/7
    model = out / "model_00000002.bin"
    for labels, want in [(choices, 7), ([(c + 1) % 4 for c in choices], 0)]:
        relabeled = [(lab, ctx, e) for lab, (_, ctx, e) in zip(labels, examples)]
        f = write_eval(tmp_path / f"relabeled_{want}.bin", relabeled)
        _, text = run(*TINY, "-i", random_shard, "-e", model, "-b", "4", "-t", "32", "-v", "0", "-x", "1", "-l", "0",
                      "-h", "1", "-hf", f)
        assert [r[1] for r in hellaswag_result(text)] == [want]


@pytest.mark.parametrize("name, patch, needle", [
    ("magic", lambda h, w: h.__setitem__(0, 20240520), "magic"),
    ("version", lambda h, w: h.__setitem__(1, 2), "version"),
    ("count", lambda h, w: h.__setitem__(2, 3), "example 2"),
    ("label", lambda h, w: w.__setitem__(3, 4), "label"),
    ("token", lambda h, w: w.__setitem__(6, 60000), "context token 0"),
    ("index", lambda h, w: w.__setitem__(2, 9), "example_index"),
])
def test_malformed_eval_files_are_refused(tmp_path, random_shard, name, patch, needle):
    f = write_eval(tmp_path / f"bad_{name}.bin", make_examples(2, seed=4), patch=patch)
    code, text = run(*TINY, "-i", random_shard, "-b", "4", "-t", "64", "-v", "0", "-x", "1", "-h", "1", "-hf", f, check=False)
    line = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert code == 1 and len(line) == 1 and f in line[0] and needle in line[0], text
    assert "step" not in text.split("error:")[0]                    # refused before any training


def test_hellaswag_needs_four_rows_and_fitting_examples(tmp_path, random_shard):
    f = write_eval(tmp_path / "ok.bin", make_examples(2, seed=5))
    code, text = run(*TINY, "-i", random_shard, "-b", "2", "-t", "64", "-x", "1", "-h", "1", "-hf", f, check=False)
    assert code == 1 and "error: -h 1" in text and "-b >= 4" in text
    code, text = run(*TINY, "-i", random_shard, "-b", "4", "-t", "8", "-x", "1", "-h", "1", "-hf", f, check=False)
    assert code == 1 and "exceed the sequence length T=8" in text and f in text
    code, text = run(*TINY, "-i", random_shard, "-b", "4", "-t", "64", "-x", "1", "-h", "1", "-hf", str(tmp_path / "missing.bin"),
                     check=False)
    assert code == 1 and "error: -hf" in text
