"""End-to-end tests of the CPU trainer binary (train_gpt2): a short real training run on Tiny
Shakespeare, its log and checkpoints, resuming from a checkpoint, and rejected bad input.

The binary comes from $TRAIN_GPT2 (set by `make test`), else build/cpu/train_gpt2."""
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("TRAIN_GPT2", REPO / "build" / "cpu" / "train_gpt2"))
TRAIN = REPO / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
VAL = REPO / "data" / "tinyshakespeare" / "tiny_shakespeare_val.bin"
TOK = REPO / "data" / "gpt2_tokenizer.bin"
SMALL = ["-e", "d2,c64,h4,t64", "-b", "4", "-t", "64", "-m", "4", "-g", "8", "-u", "5"]

pytestmark = pytest.mark.skipif(not (BIN.exists() and TRAIN.exists() and VAL.exists()),
                                reason="needs build/cpu/train_gpt2 and the Tiny Shakespeare shards")


def num_params(L, C, maxT, Vp):
    """Parameter count of a GPT-2 of these sizes (doc/FORMATS.md tensor table)."""
    per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return Vp * C + maxT * C + L * per_layer + 2 * C


def run(*args, check=True):
    """Run the trainer with args; return (exit code, stdout+stderr)."""
    p = subprocess.run([str(BIN), "-i", str(TRAIN), "-j", str(VAL), "-tk", str(TOK), *map(str, args)],
                       capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    if check and p.returncode != 0:
        raise AssertionError(f"train_gpt2 failed ({p.returncode}):\n{out}")
    return p.returncode, out


def parse_log(path):
    """Return {step: trl} and {step: tel} from main.log."""
    train, val = {}, {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            continue
        kv = dict(item.split(":", 1) for item in line.split())
        if "trl" in kv:
            train[int(kv["s"])] = float(kv["trl"])
        if "tel" in kv:
            val[int(kv["s"])] = float(kv["tel"])
    return train, val


def test_short_training_run_learns_and_writes_outputs(tmp_path):
    out = tmp_path / "run"
    _, text = run(*SMALL, "-x", "60", "-l", "3e-3", "-v", "30", "-s", "60", "-n", "30", "-o", out)
    train, val = parse_log(out / "main.log")
    assert sorted(train) == list(range(1, 61))
    assert sorted(val) == [0, 30, 60]
    assert 10.5 < val[0] < 11.2, val            # ln(50257) = 10.82 at init
    assert val[60] < val[0] - 2.5, val           # a real drop within 60 steps
    assert "generating:" in text
    for step in (30, 60):
        ck = out / f"model_{step:08d}.bin"
        header = struct.unpack("<8i", ck.read_bytes()[:32])
        assert header[:8] == (20240326, 3, 64, 50257, 2, 4, 64, 50304)
    assert not list(out.glob("*.tmp"))


def test_resume_from_checkpoint_continues_at_its_loss(tmp_path):
    out = tmp_path / "run"
    run(*SMALL, "-x", "40", "-l", "3e-3", "-v", "40", "-s", "0", "-o", out)
    _, val = parse_log(out / "main.log")
    _, text = run(*SMALL, "-e", out / "model_00000040.bin", "-x", "1", "-v", "1", "-s", "0")
    first_val = float(re.search(r"step\s+0 \| val loss ([0-9.]+)", text).group(1))
    assert abs(first_val - val[40]) < 1e-5


def test_gradient_accumulation_matches_a_larger_batch(tmp_path):
    """-b 4 -d 512 (2 micro-batches of 4x64) takes the same first step as -b 8 -t 64."""
    _, a = run("-e", "d2,c64,h4,t64", "-t", "64", "-b", "4", "-d", "512", "-x", "2", "-v", "0", "-s", "0", "-u", "0")
    _, b = run("-e", "d2,c64,h4,t64", "-t", "64", "-b", "8", "-x", "2", "-v", "0", "-s", "0", "-u", "0")
    la = [float(x) for x in re.findall(r"\| loss ([0-9.]+)", a)]
    lb = [float(x) for x in re.findall(r"\| loss ([0-9.]+)", b)]
    assert len(la) == len(lb) == 2
    assert la == pytest.approx(lb, rel=1e-5)


@pytest.mark.parametrize("args, needle", [
    (["-b", "x"], "-b: expected an integer"),
    (["-zz", "1"], "-zz: unknown flag"),
    (["-d", "100"], "-d: 100 is not a positive multiple"),
    (["-e", "q12"], "-e"),
    (["-k", "triangle"], "-k"),
    (["-t", "2048"], "-t"),
    (["-i", "/nonexistent/shard_*.bin"], "/nonexistent/shard_*.bin"),
])
def test_bad_flags_fail_with_a_named_error(args, needle):
    code, text = run(*SMALL, "-x", "1", *args, check=False)
    assert code != 0
    assert needle in text
    assert "error:" in text


def test_divergence_stops_with_an_error_and_keeps_earlier_checkpoints(tmp_path):
    out = tmp_path / "run"
    code, text = run(*SMALL, "-x", "30", "-l", "1e30", "-u", "0", "-c", "0", "-gc", "0", "-v", "0", "-s", "0",
                     "-n", "1", "-o", out, check=False)
    assert code != 0
    assert "loss is" in text and "error:" in text
    checkpoints = sorted(out.glob("model_*.bin"))
    assert checkpoints, "the checkpoint of step 1 (before the loss blew up) should exist"
    for ck in checkpoints:                    # every checkpoint written before the stop is whole
        assert ck.stat().st_size == 1024 + 4 * num_params(L=2, C=64, maxT=64, Vp=50304)
    assert not list(out.glob("*.tmp"))
