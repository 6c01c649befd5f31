"""Tests of scripts/bench_vs_pytorch.py (our trainer against the same GPT-2 in PyTorch).

Everything runs on the CPU: the CPU trainer ($TRAIN_GPT2, set by `make test`, else
build/cpu/train_gpt2) stands in for train_gpt2cu (same flags and step / val / config lines), PyTorch
runs with --device cpu --no-compile, on a tiny model (d2,c32,h2,t32) and token shards written here.
Unit tests check the pieces against hand-computed values (batch order, schedule, shapes, init,
verdict, the PyTorch model's two losses: nanoGPT-style over Vp for speed, exact over V for the loss
check); one test gives both sides the same weights and checks that they compute the same losses
(exact model, loss over V, data order, validation batches, AdamW step); one runs the whole script.
"""
import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_vs_pytorch.py"
BIN = Path(os.environ.get("TRAIN_GPT2", REPO / "build" / "cpu" / "train_gpt2"))
TINY = "d2,c32,h2,t32"
B, T = 2, 32

needs_trainer = pytest.mark.skipif(not BIN.exists(), reason="needs build/cpu/train_gpt2 (make train_gpt2)")


def load_script():
    """Import scripts/bench_vs_pytorch.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_vs_pytorch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_script()


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 header words (magic, version, count), then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = 20240520, 1, len(tokens)
    Path(path).write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Two train shards (3000 and 2000 tokens) and one val shard (1000), random ids below 300."""
    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(7)
    write_shard(d / "train_000000.bin", rng.integers(0, 300, 3000))
    write_shard(d / "train_000001.bin", rng.integers(0, 300, 2000))
    write_shard(d / "val_000000.bin", rng.integers(0, 300, 1000))
    return str(d / "train_*.bin"), str(d / "val_*.bin")


def run_bench(*args, env=None, timeout=300):
    """Run the script; returns (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def cpu_args(train, val, out, *extra):
    """The script's arguments for a tiny CPU run."""
    return ["--device", "cpu", "--no-compile", "--models", TINY, "--batch", B, "--T", T, "--train", train,
            "--val", val, "--trainer", BIN, "--trainer-flags", "-threads 1", "--out", out, *extra]


def assert_one_error_line(code, stderr, needle):
    """Exit status 1 and exactly one stderr line: `error: ...` containing needle."""
    lines = stderr.strip().splitlines()
    assert code == 1, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert needle in lines[0], lines[0]


# ------------------------------------------------------------------------------------------------
# Pieces


def test_batches_follow_the_trainer_dataloader_order(tmp_path):
    # B*T = 8: shard 0 (24 tokens) holds two windows of 9 (at 0 and 8; at 16 only 8 tokens remain),
    # shard 1 (16 tokens) one (at 8 only 8 remain), then the stream wraps to shard 0 (llmc/data/dataloader.h, one process)
    s0, s1 = 1000 + np.arange(24), 2000 + np.arange(16)
    write_shard(tmp_path / "x_000.bin", s0)
    write_shard(tmp_path / "x_001.bin", s1)
    stream = bench.ShardStream(str(tmp_path / "x_*.bin"), 2, 4, "--train")
    expected = [s0[0:9], s0[8:17], s1[0:9], s0[0:9]]
    for window in expected:
        inputs, targets = stream.next_batch()
        assert inputs.shape == targets.shape == (2, 4)
        assert inputs.dtype == np.int64
        assert inputs.ravel().tolist() == window[:8].tolist()
        assert targets.ravel().tolist() == window[1:].tolist()
    stream.reset()
    assert stream.next_batch()[0].ravel().tolist() == s0[:8].tolist()
    # validation batches: the trainer caps -m at num_tokens / (B*T+1) = 40 / 9
    assert bench.val_batch_count(stream, 100) == 4 and bench.val_batch_count(stream, 2) == 2


def test_bad_shards_name_the_file(tmp_path):
    write_shard(tmp_path / "a.bin", np.arange(5))
    with pytest.raises(bench.BenchError, match=r"a\.bin: 5 tokens, a batch needs"):
        bench.ShardStream(str(tmp_path / "a.bin"), 2, 4, "--train")
    (tmp_path / "b.bin").write_bytes(b"\0" * 1100)
    with pytest.raises(bench.BenchError, match=r"b\.bin: not a token shard"):
        bench.ShardStream(str(tmp_path / "b.bin"), 1, 1, "--val")
    with pytest.raises(bench.BenchError, match=r"--val .*nothing_\*\.bin: no files match"):
        bench.ShardStream(str(tmp_path / "nothing_*.bin"), 1, 1, "--val")
    write_shard(tmp_path / "c.bin", np.full(20, 50257))
    with pytest.raises(bench.BenchError, match=r"token id >= 50257"):
        bench.ShardStream(str(tmp_path / "c.bin"), 1, 4, "--train").next_batch()


@pytest.mark.parametrize("kind, step, lr", [
    # peak 1e-3, 4 warmup steps, 20 steps, final fraction 0.1 (lr_min 1e-4), by hand from schedulers.h
    ("cosine", 0, 2.5e-4), ("cosine", 3, 1e-3), ("cosine", 4, 1e-3),
    ("cosine", 8, 1e-4 + 0.5 * (1 + math.cos(math.pi / 4)) * 9e-4), ("cosine", 12, 5.5e-4), ("cosine", 20, 1e-4),
    ("cosine", 25, 1e-4),                                    # past the end: clamped
    ("linear", 1, 5e-4), ("linear", 8, 7.75e-4), ("linear", 12, 5.5e-4), ("linear", 20, 1e-4),
    ("constant", 0, 1e-3), ("constant", 19, 1e-3),           # no warmup either
    ("wsd", 2, 7.5e-4), ("wsd", 10, 1e-3), ("wsd", 16, 1e-3),  # decay over the last 4 steps (16..20)
    ("wsd", 17, 1e-4 + 0.5 * 9e-4), ("wsd", 20, 1e-4),
])
def test_schedule_matches_schedulers_h(kind, step, lr):
    assert bench.learning_rate(step, 1e-3, 4, 20, 0.1, kind) == pytest.approx(lr, rel=1e-12)


def test_schedule_with_warmup_past_the_end_ends_at_the_final_rate():
    assert bench.learning_rate(9, 1e-3, 30, 20, 0.1, "cosine") == pytest.approx(1e-3 * 10 / 30)
    assert bench.learning_rate(30, 1e-3, 30, 20, 0.1, "cosine") == pytest.approx(1e-4)  # empty decay window: r = 1


def test_descriptors_shapes_and_flops():
    d12, d24 = bench.parse_descriptor("d12"), bench.parse_descriptor("d24")
    assert (d12.L, d12.C, d12.NH, d12.maxT, d12.V, d12.Vp) == (12, 768, 12, 1024, 50257, 50304)
    assert (d24.L, d24.C, d24.NH) == (24, 1024, 16)
    assert bench.num_parameters(d12) == 124_475_904  # llmc/model/gpt2_config.h
    assert bench.flops_per_token(d12, 1024) == 6 * 124_475_904 + 6 * 12 * 768 * 1024
    tiny = bench.parse_descriptor("d2,c64,h4,t64")
    assert (tiny.L, tiny.C, tiny.NH, tiny.maxT) == (2, 64, 4, 64)
    d5 = bench.parse_descriptor("d5")
    assert (d5.C, d5.NH) == (320, 5)  # C = 64 L, NH = L off the GPT-2 table
    for bad in ("12", "d12,x3", "d12,c64,c64", "d2,c30,h4", "d0"):
        with pytest.raises(bench.BenchError):
            bench.parse_descriptor(bad)


def test_model_lists_and_batch_sizes():
    assert bench.split_models("d12,d24") == ["d12", "d24"]
    assert bench.split_models("d2,c64,h4,t64,d12") == ["d2,c64,h4,t64", "d12"]
    models = ["d12", "d24", "d2,c32"]
    assert bench.batch_sizes(None, models) == {"d12": 64, "d24": 32, "d2,c32": bench.FALLBACK_BATCH}
    assert bench.batch_sizes("4", models) == {"d12": 4, "d24": 4, "d2,c32": 4}
    assert bench.batch_sizes("d24=8,d2,c32=2", models) == {"d12": 64, "d24": 8, "d2,c32": 2}
    with pytest.raises(bench.BenchError, match="--batch"):
        bench.batch_sizes("d36=8", models)


def test_peaks_come_from_mfu_h():
    peaks = bench.read_device_peaks()
    text = (REPO / "llmc" / "train" / "mfu.h").read_text()
    assert len(peaks) == text.count('{"') and len(peaks) >= 5
    assert bench.device_peak_tflops("NVIDIA H100 80GB HBM3", peaks) == 989.4
    assert bench.device_peak_tflops("NVIDIA H100 PCIe", peaks) == 756.0  # the first match wins, as in mfu.h
    assert bench.device_peak_tflops("NVIDIA A100-SXM4-80GB", peaks) == 312.0
    assert bench.device_peak_tflops("Some GPU", peaks) is None


def test_speed_numbers_and_verdict():
    s = bench.speed_numbers([50.0, 4.0, 2.0, 3.0, 1.0], 1, 2, 32, 1e6, 0.5)
    assert s["median_ms"] == 3.0  # upper median of [1, 2, 3, 4], as the trainer's seconds[n / 2]
    assert s["tok_s"] == pytest.approx(64 / 3e-3)
    assert s["mfu_pct"] == pytest.approx(1e6 * 64 / 3e-3 / 0.5e12 * 100)
    assert bench.speed_numbers([2.0, 1.0], 1, 2, 32, 1e6, None)["mfu_pct"] is None
    v = bench.loss_verdict(5.55, [5.54, 5.56], 0.01)
    assert (v["noise"], v["diff"], v["verdict"]) == (pytest.approx(0.02), pytest.approx(0.0), "agree")
    v = bench.loss_verdict(5.60, [5.54, 5.545], 0.02)  # noise 0.005 < floor; diff 0.0575
    assert (v["tolerance"], v["verdict"]) == (0.02, "DIFFER")
    assert bench.loss_verdict(5.60, [5.50, 5.62], 0.02)["verdict"] == "agree"  # noise 0.12 covers diff 0.04


def test_init_draws_the_trainer_distribution_and_decay_groups():
    shape = bench.parse_descriptor("d2,c64,h4,t64")
    model = bench.GPT2(shape)
    bench.init_weights(model, 3)
    wte = model.wte.weight.detach()
    assert wte[:shape.V].std().item() == pytest.approx(0.02, rel=0.01)
    assert wte[shape.V:].abs().max().item() == 0.0  # padded rows
    assert model.wpe.weight.std().item() == pytest.approx(0.02, rel=0.05)
    resid = 0.02 / math.sqrt(2 * shape.L)
    for block in model.blocks:
        assert block.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert block.fc.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert block.attproj.weight.std().item() == pytest.approx(resid, rel=0.05)
        assert block.fcproj.weight.std().item() == pytest.approx(resid, rel=0.05)
        for p in (block.qkv.bias, block.attproj.bias, block.fc.bias, block.fcproj.bias, block.ln1.bias, block.ln2.bias):
            assert p.abs().max().item() == 0.0
        assert block.ln1.weight.min().item() == block.ln2.weight.max().item() == 1.0
    first = model.wte.weight.detach().clone()
    bench.init_weights(model, 3)
    assert torch.equal(first, model.wte.weight.detach())  # the seed alone decides
    bench.init_weights(model, 4)
    assert not torch.equal(first, model.wte.weight.detach())
    settings = bench.torch_settings("cpu", True, "none")
    groups = bench.make_optimizer(model, settings, 0.1).param_groups
    decayed = {id(p) for p in groups[0]["params"]}
    expected = {id(model.wte.weight), id(model.wpe.weight)} | {
        id(layer.weight) for b in model.blocks for layer in (b.qkv, b.attproj, b.fc, b.fcproj)}
    assert decayed == expected and groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert groups[0]["betas"] == (0.9, 0.95) and groups[0]["eps"] == 1e-8


def test_a_diverging_pytorch_run_stops_with_the_step(shards):
    shape = bench.parse_descriptor(TINY)
    tm = bench.TorchModel(shape, bench.torch_settings("cpu", True, "none"))
    train = bench.ShardStream(shards[0], B, T, "--train")
    run = bench.RunSpec(label=TINY, B=B, T=T, steps=6, val_batches=0, seed=1, lr=1e9, warmup=0, final_frac=1.0,
                        schedule="constant", weight_decay=0.0, grad_clip=0.0)
    with pytest.raises(bench.BenchError, match=r"PyTorch d2,c32,h2,t32 seed 1: step [2-6]: train loss is (nan|inf)"):
        bench.train_torch(tm, run, train, train, os.devnull)


# The two PyTorch models: the speed runs' "nanogpt" (cross-entropy over all Vp columns) and the loss
# runs' "exact" (over the first V). The model computes its loss in float32 (logits.float(), as under
# autocast); the reference here is a float64 copy of the same weights whose loss is taken by hand
# with logsumexp, without the model's loss code.

VARIANT_SHAPE = bench.Shape(L=1, C=16, NH=2, maxT=8)  # the real V and Vp: the padded block is 47 columns


def random_model(variant, seed, std, padded_scale):
    """A float32 GPT2 of VARIANT_SHAPE with every parameter N(0, std^2) (seeded), the padded rows of
    wte multiplied by padded_scale (0: zero rows, as the script's init leaves them)."""
    torch.manual_seed(seed)
    model = bench.GPT2(VARIANT_SHAPE, variant)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
        model.wte.weight[VARIANT_SHAPE.V:] *= padded_scale
    return model


def batch(seed):
    """(inputs, targets) of shape (2, 8), ids below V, the targets including the last real id V - 1."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VARIANT_SHAPE.V, (2, 9), generator=gen)
    idx[1, 8] = VARIANT_SHAPE.V - 1
    return idx[:, :8].contiguous(), idx[:, 1:].contiguous()


def loss_by_hand(model, inputs, targets, columns):
    """Mean over positions of logsumexp(logits[:columns]) - logits[target], logits = lnf(trunk) @ wte^T,
    all in float64 on a copy of model."""
    model = copy.deepcopy(model).double()
    T = inputs.shape[1]
    x = model.wte(inputs) + model.wpe(torch.arange(T))
    for block in model.blocks:
        x = block(x)
    logits = model.lnf(x).reshape(-1, VARIANT_SHAPE.C) @ model.wte.weight.T
    assert logits.shape[1] == VARIANT_SHAPE.Vp
    kept = logits[:, :columns]
    picked = kept.gather(1, targets.reshape(-1, 1)).squeeze(1)
    return (torch.logsumexp(kept, dim=1) - picked).mean().item()


@pytest.mark.parametrize("variant, columns", [("nanogpt", bench.VP), ("exact", bench.V)])
def test_each_variant_takes_the_cross_entropy_over_its_columns(variant, columns):
    # the script's own path on the CPU: TorchModel.loss (what train_torch calls), weights N(0, 0.3^2)
    tm = bench.TorchModel(VARIANT_SHAPE, bench.torch_settings("cpu", True, "none"), variant)
    tm.module.load_state_dict(random_model(variant, 5, 0.3, padded_scale=1.0).state_dict())
    inputs, targets = batch(6)
    with torch.no_grad():
        loss = tm.loss(inputs.numpy(), targets.numpy()).item()
    assert loss == pytest.approx(loss_by_hand(tm.module, inputs, targets, columns), abs=1e-5)


def test_the_variants_differ_over_the_padded_columns():
    nano, exact = random_model("nanogpt", 5, 0.3, padded_scale=10.0), random_model("exact", 5, 0.3, padded_scale=10.0)
    assert all(torch.equal(a, b) for a, b in zip(nano.state_dict().values(), exact.state_dict().values()))
    inputs, targets = batch(6)
    nano_loss, exact_loss = nano(inputs, targets), exact(inputs, targets)
    # non-zero padded rows: the nanogpt softmax gives the padded ids real mass; exact ignores them
    assert nano_loss.item() - exact_loss.item() > 0.1
    assert nano_loss.item() == pytest.approx(loss_by_hand(nano, inputs, targets, bench.VP), abs=1e-5)
    assert exact_loss.item() == pytest.approx(loss_by_hand(exact, inputs, targets, bench.V), abs=1e-5)
    nano_loss.backward()
    exact_loss.backward()
    assert exact.wte.weight.grad[bench.V:].abs().max().item() == 0.0  # no gradient into the padded rows
    assert nano.wte.weight.grad[bench.V:].abs().max().item() > 1e-3
    # zero padded rows and small weights (the script's init): the 47 padded logits are 0 and the
    # others near 0, so the nanogpt loss is about ln(Vp / V) = 9.3e-4 above the exact one
    zero_nano, zero_exact = random_model("nanogpt", 5, 0.02, 0.0), random_model("exact", 5, 0.02, 0.0)
    with torch.no_grad():
        gap = zero_nano(inputs, targets).item() - zero_exact(inputs, targets).item()
    assert gap == pytest.approx(loss_by_hand(zero_nano, inputs, targets, bench.VP)
                                - loss_by_hand(zero_exact, inputs, targets, bench.V), abs=1e-5)
    assert gap == pytest.approx(math.log(bench.VP / bench.V), rel=0.05)
    with pytest.raises(bench.BenchError, match=r"PyTorch model 'bogus': expected one of nanogpt, exact"):
        bench.GPT2(VARIANT_SHAPE, "bogus")


def test_the_table_names_the_pytorch_model_of_each_number():
    side = {"median_ms": 2.0, "tok_s": 32000.0, "mfu_pct": None}
    speed = {"ours": {**side, "mem_peak_mib": None, "mem_end_mib": None},
             "pytorch": {**side, "mem_allocated_mib": None, "mem_reserved_mib": None, "mem_device_mib": None,
                         "torch_model": "nanogpt"}, "ratio": 1.0}
    entry = {"model": TINY, "B": 2, "speed": speed}
    settings = bench.torch_settings("cpu", True, "none")
    rows = table_rows(bench.render_table([entry], settings, "ours_bin"))
    assert rows[0][-1] == "–" and rows[1][-1] == "nanoGPT-style (loss over Vp)"
    speed["pytorch"]["torch_model"] = "exact"
    loss = {**bench.loss_verdict(5.0, [5.01, 5.02], 0.02), "torch_models": ["exact", "exact"]}
    entry.update(loss=loss, loss_steps=4, val_batches=3, loss_seeds=[1, 2])
    text = bench.render_table([entry], settings, "ours_bin")
    assert table_rows(text)[1][-1] == "exact (loss over V)"
    assert "PyTorch exact (loss over V) 5.0100 / 5.0200 (seeds 1, 2)" in text


# ------------------------------------------------------------------------------------------------
# Same weights on both sides


def write_checkpoint(path, model):
    """The model's weights as a version 3 (fp32) checkpoint in doc/FORMATS.md's tensor order."""
    s, blocks = model.shape, model.blocks

    def stacked(get):
        return torch.stack([get(b) for b in blocks])

    tensors = [model.wte.weight, model.wpe.weight,
               stacked(lambda b: b.ln1.weight), stacked(lambda b: b.ln1.bias),
               stacked(lambda b: b.qkv.weight), stacked(lambda b: b.qkv.bias),
               stacked(lambda b: b.attproj.weight), stacked(lambda b: b.attproj.bias),
               stacked(lambda b: b.ln2.weight), stacked(lambda b: b.ln2.bias),
               stacked(lambda b: b.fc.weight), stacked(lambda b: b.fc.bias),
               stacked(lambda b: b.fcproj.weight), stacked(lambda b: b.fcproj.bias),
               model.lnf.weight, model.lnf.bias]
    assert sum(t.numel() for t in tensors) == bench.num_parameters(s)
    header = np.zeros(256, dtype="<i4")
    header[:8] = 20240326, 3, s.maxT, s.V, s.L, s.NH, s.C, s.Vp
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            f.write(t.detach().numpy().astype("<f4").tobytes())


def scaled_init(model, seed):
    """The script's init with the weight matrices 10x larger: O(1) pre-activations, so that the GELU
    form, the attention and the optimizer constants all move the losses by more than fp32 noise."""
    original_init(model, seed)
    with torch.no_grad():
        for b in model.blocks:
            for layer in (b.qkv, b.attproj, b.fc, b.fcproj):
                layer.weight.mul_(10.0)


original_init = bench.init_weights
STEPS = 4


@needs_trainer
def test_same_weights_give_the_trainers_losses(tmp_path, shards, monkeypatch):
    """The PyTorch model started from our trainer's weights reproduces its val loss (same val batches,
    -m capped alike), its first train loss (same first batch, loss over V) and the losses after each
    AdamW step (optimizer constants, decay groups, clipping, schedule)."""
    monkeypatch.setattr(bench, "init_weights", scaled_init)
    train_pattern, val_pattern = shards
    shape = bench.parse_descriptor(TINY)
    tm = bench.TorchModel(shape, bench.torch_settings("cpu", True, "none"), "exact")
    seed = 11
    bench.init_weights(tm.module, seed)
    ckpt = tmp_path / "init.bin"
    write_checkpoint(ckpt, tm.module)

    run = bench.RunSpec(label=str(ckpt), B=B, T=T, steps=STEPS, val_batches=100, seed=seed, lr=1e-2, warmup=2,
                        final_frac=0.1, schedule="cosine", weight_decay=0.5, grad_clip=1.0)
    argv = bench.ours_command(BIN, run, train_pattern, val_pattern, ["-threads", "1"], has_lg=False)
    ours = bench.run_ours(argv, tmp_path / "ours.log", run, shape)
    text = (tmp_path / "ours.log").read_text()
    ours_train = [float(x) for x in re.findall(rf"^step\s+\d+/{STEPS} \| loss (\S+) \|", text, re.M)]
    ours_lr = [float(x) for x in re.findall(rf"^step\s+\d+/{STEPS} \|.*\| lr (\S+) \|", text, re.M)]

    val = bench.ShardStream(val_pattern, B, T, "--val")
    torch_run = bench.RunSpec(**{**vars(run), "label": TINY, "val_batches": bench.val_batch_count(val, 100)})
    assert torch_run.val_batches == 1000 // (B * T + 1)
    mine = bench.train_torch(tm, torch_run, bench.ShardStream(train_pattern, B, T, "--train"), val, tmp_path / "t.log")

    assert sorted(ours["val"]) == sorted(mine["val"]) == [0, STEPS]
    assert mine["val"][0] == pytest.approx(ours["val"][0], abs=2e-5)
    assert mine["loss"] == pytest.approx(ours_train, abs=2e-5)
    assert mine["val"][STEPS] == pytest.approx(ours["val"][STEPS], abs=2e-5)
    assert abs(ours_train[0] - ours_train[-1]) > 0.05  # the updates changed the loss
    for step, lr in enumerate(ours_lr):
        assert bench.learning_rate(step, 1e-2, 2, STEPS, 0.1, "cosine") == pytest.approx(lr, rel=5e-3)  # printed %.2e


# ------------------------------------------------------------------------------------------------
# The whole script


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, shards):
    """One complete CPU run: 5 speed steps (2 warm-up), 4 loss steps, 3 val batches."""
    if not BIN.exists():
        pytest.skip("needs build/cpu/train_gpt2 (make train_gpt2)")
    out = tmp_path_factory.mktemp("bench") / "out"
    code, stdout, stderr = run_bench(*cpu_args(*shards, out, "--steps", 5, "--warmup-steps", 2, "--val-steps", 4,
                                               "--val-batches", 3, "--peak-tflops", 0.05))
    assert code == 0, stdout + stderr
    return out, stdout, json.loads((out / "results.json").read_text())


def table_rows(text):
    """The data rows of the markdown table as lists of cells."""
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row] for row in rows[1:]]


@needs_trainer
def test_full_run_writes_table_json_and_logs(full_run):
    out, stdout, report = full_run
    table = (out / "table.md").read_text()
    assert table in stdout + "\n"
    rows = table_rows(table)
    assert [r[:3] for r in rows] == [[TINY, f"ours ({BIN})", "2"], [TINY, rows[1][1], "2"]]
    assert rows[1][1].startswith("PyTorch (torch ") and "fp32, eager" in rows[1][1]
    names = sorted(p.name for p in out.iterdir())
    tag = TINY.replace(",", "-")
    assert names == sorted(["results.json", "table.md", f"ours_{tag}_speed.log", f"ours_{tag}_loss.log",
                            f"torch_{tag}_speed.log", f"torch_{tag}_loss_seed1337.log", f"torch_{tag}_loss_seed1338.log"])
    (m,) = report["models"]
    assert (m["model"], m["B"], m["T"], m["parameters"]) == (TINY, 2, 32, bench.num_parameters(bench.parse_descriptor(TINY)))
    for side in ("ours", "pytorch"):
        s = m["speed"][side]
        for key in ("median_ms", "tok_s", "mfu_pct"):
            assert math.isfinite(s[key]) and s[key] > 0, (side, key, s[key])
        assert len(s["step_ms"]) == 5
        assert s["median_ms"] == sorted(s["step_ms"][2:])[1]  # upper median after 2 warm-up steps
        assert s["tok_s"] == pytest.approx(2 * 32 / (s["median_ms"] * 1e-3))
        assert s["mfu_pct"] == pytest.approx(m["flops_per_token"] * s["tok_s"] / 0.05e12 * 100)
    assert m["speed"]["ratio"] == pytest.approx(m["speed"]["ours"]["tok_s"] / m["speed"]["pytorch"]["tok_s"])
    ours_row, torch_row = rows
    assert ours_row[3] == f"{m['speed']['ours']['median_ms']:.2f}" and torch_row[3] == f"{m['speed']['pytorch']['median_ms']:.2f}"
    assert ours_row[4] == f"{m['speed']['ours']['tok_s']:,.0f}"
    assert ours_row[7] == f"{m['speed']['ratio']:.3f}"


@needs_trainer
def test_full_run_step_times_come_from_the_logs(full_run):
    out, _, report = full_run
    (m,) = report["models"]
    tag = TINY.replace(",", "-")
    ours_ms = [float(x) for x in re.findall(r"^step\s+\d+/5 \|.*\| ([0-9.]+) ms \|",
                                            (out / f"ours_{tag}_speed.log").read_text(), re.M)]
    assert ours_ms == m["speed"]["ours"]["step_ms"]
    torch_ms = [float(x) for x in re.findall(r"^step\s+\d+/5 \|.*\| ([0-9.]+) ms \|",
                                             (out / f"torch_{tag}_speed.log").read_text(), re.M)]
    assert torch_ms == pytest.approx(m["speed"]["pytorch"]["step_ms"], abs=0.006)
    cmd = (out / f"ours_{tag}_speed.log").read_text().splitlines()[0]
    for flags in ("-e d2,c32,h2,t32 -b 2 -t 32 -x 5 -l 0.0006 -u 30 -q 0.1 -k cosine -c 0.1 -gc 1.0 -seed 1337",
                  "-s 0 -n -1", "-v 0 -threads 1"):
        assert flags in cmd, cmd


@needs_trainer
def test_full_run_loss_check(full_run):
    out, stdout, report = full_run
    (m,) = report["models"]
    tag = TINY.replace(",", "-")
    loss = m["loss"]
    ours_val = re.findall(r"^step\s+(\d+) \| val loss (\S+)$", (out / f"ours_{tag}_loss.log").read_text(), re.M)
    assert [s for s, _ in ours_val] == ["0", "4"] and loss["ours"] == float(ours_val[1][1])
    torch_val = [float(re.findall(r"^step\s+4 \| val loss (\S+)$", (out / f"torch_{tag}_loss_seed{s}.log").read_text(), re.M)[0])
                 for s in (1337, 1338)]
    assert loss["pytorch"] == pytest.approx(torch_val, abs=1e-6)
    assert loss["pytorch"][0] != loss["pytorch"][1]  # two seeds, two inits
    assert loss["noise"] == pytest.approx(abs(torch_val[0] - torch_val[1]), abs=2e-6)
    assert loss["diff"] == pytest.approx(abs(loss["ours"] - sum(loss["pytorch"]) / 2))
    assert loss["verdict"] == ("agree" if loss["diff"] <= max(loss["noise"], 0.02) else "DIFFER")
    assert m["val_batches"] == 3 and m["loss_seeds"] == [1337, 1338]
    for v in (loss["ours"], *loss["pytorch"], m["val_step0"]["ours"], *m["val_step0"]["pytorch"]):
        assert 9.0 < v < 12.0  # near ln(50257) = 10.8 after a few steps
    assert f"**{loss['verdict']}**" in stdout
    assert table_rows((out / "table.md").read_text())[1][8] == " / ".join(f"{v:.4f}" for v in loss["pytorch"])


def first_train_loss(path):
    """The step-1 train loss of a torch_*.log."""
    return float(re.search(r"^step\s+1/\d+ \| loss (\S+) \|", Path(path).read_text(), re.M).group(1))


@needs_trainer
def test_full_run_names_the_pytorch_models(full_run):
    out, stdout, report = full_run
    (m,) = report["models"]
    tag = TINY.replace(",", "-")
    assert report["settings"]["torch_speed_model"] == "nanogpt"  # the default
    assert report["torch_models"] == {"nanogpt": "nanoGPT-style (loss over Vp)", "exact": "exact (loss over V)"}
    assert m["speed"]["pytorch"]["torch_model"] == "nanogpt" and m["loss"]["torch_models"] == ["exact", "exact"]
    ours_row, torch_row = table_rows((out / "table.md").read_text())
    assert ours_row[9] == "–"
    assert torch_row[9] == "speed: nanoGPT-style (loss over Vp); val loss: exact (loss over V)"
    assert "PyTorch exact (loss over V) " in stdout
    speed_log = out / f"torch_{tag}_speed.log"
    loss_log = out / f"torch_{tag}_loss_seed1337.log"
    assert speed_log.read_text().startswith("# PyTorch nanoGPT-style (loss over Vp) (torch ")
    assert loss_log.read_text().startswith("# PyTorch exact (loss over V) (torch ")
    # the same seed, weights and first batch: the speed run's first loss is the exact one plus the
    # mass of the 47 padded columns, whose logits are 0 (zero rows): about ln(Vp / V) at init
    gap = first_train_loss(speed_log) - first_train_loss(loss_log)
    assert gap == pytest.approx(math.log(bench.VP / bench.V), abs=1e-4)


@needs_trainer
def test_the_exact_speed_model_on_request(tmp_path, shards):
    out = tmp_path / "out"
    code, stdout, stderr = run_bench(*cpu_args(*shards, out, "--steps", 3, "--warmup-steps", 1, "--val-steps", 0,
                                               "--torch-speed-model", "exact"))
    assert code == 0, stdout + stderr
    (m,) = json.loads((out / "results.json").read_text())["models"]
    assert m["speed"]["pytorch"]["torch_model"] == "exact" and "loss" not in m
    assert table_rows((out / "table.md").read_text())[1][9] == "exact (loss over V)"
    assert (out / "torch_d2-c32-h2-t32_speed.log").read_text().startswith("# PyTorch exact (loss over V) (")


# ------------------------------------------------------------------------------------------------
# Errors: one line, exit 1


@needs_trainer
def test_a_missing_shard_is_an_error(tmp_path, shards):
    code, _, stderr = run_bench(*cpu_args(str(tmp_path / "none_*.bin"), shards[1], tmp_path / "out"))
    assert_one_error_line(code, stderr, "--train")
    assert "no files match" in stderr and not (tmp_path / "out").exists()


def test_a_missing_trainer_is_an_error(tmp_path, shards):
    args = cpu_args(*shards, tmp_path / "out")
    args[args.index(BIN)] = tmp_path / "no_such_trainer"
    code, _, stderr = run_bench(*args)
    assert_one_error_line(code, stderr, "--trainer")


def test_a_failing_trainer_is_an_error_with_its_message(tmp_path, shards):
    fake = tmp_path / "fake_trainer"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--help" ]; then echo "  -e  string model"; exit 0; fi\n'
                    'echo "error: -e: simulated failure" >&2\nexit 1\n')
    fake.chmod(0o755)
    args = cpu_args(*shards, tmp_path / "out")
    args[args.index(BIN)] = fake
    code, _, stderr = run_bench(*args)
    assert_one_error_line(code, stderr, "trainer exited with status 1: -e: simulated failure")
    assert "ours_d2-c32-h2-t32_speed.log" in stderr


@needs_trainer
def test_a_diverging_trainer_is_an_error(tmp_path, shards):
    code, _, stderr = run_bench(*cpu_args(*shards, tmp_path / "out", "--lr", 1e9, "--warmup-iters", 0,
                                          "--grad-clip", 0, "--steps", 6, "--val-steps", 0))
    assert_one_error_line(code, stderr, "train loss is nan")


@needs_trainer
def test_torch_float8_without_torchao_is_an_error(tmp_path, shards):
    blocked = tmp_path / "blocked"  # a torchao that cannot be imported, whatever is installed
    (blocked / "torchao").mkdir(parents=True)
    (blocked / "torchao" / "__init__.py").write_text('raise ImportError("blocked for this test")\n')
    env = {**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code, _, stderr = run_bench(*cpu_args(*shards, tmp_path / "out", "--torch-float8", "tensorwise"), env=env)
    assert_one_error_line(code, stderr, "--torch-float8: torchao is not importable")
    assert "blocked for this test" in stderr


def test_bad_arguments_are_errors(tmp_path, shards):
    code, _, stderr = run_bench(*cpu_args(*shards, tmp_path / "out", "--steps", 3, "--warmup-steps", 3))
    assert_one_error_line(code, stderr, "--steps 3: must exceed --warmup-steps 3")
    code, _, stderr = run_bench(*cpu_args(*shards, tmp_path / "out", "--T", 64))
    if BIN.exists():
        assert_one_error_line(code, stderr, "--T 64: exceeds model d2,c32,h2,t32's maxT 32")


def test_a_bad_torch_speed_model_is_refused(tmp_path, shards):
    code, stdout, stderr = run_bench(*cpu_args(*shards, tmp_path / "out", "--torch-speed-model", "bogus"))
    assert code == 2 and stdout == ""  # argparse's usage error, as for every flag with choices
    assert "error: argument --torch-speed-model: invalid choice: 'bogus'" in stderr.strip().splitlines()[-1]
    assert "nanogpt" in stderr and "exact" in stderr and not (tmp_path / "out").exists()
