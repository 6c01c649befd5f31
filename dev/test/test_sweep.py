"""Tests of scripts/sweep.py (precision sweeps: build, run, resume, report) and scripts/plot_stats.py
(tensor-statistics heatmaps).

Real runs use the CPU trainer ($TRAIN_GPT2, set by `make test`, else build/cpu/train_gpt2), copied
into a private build folder so that the sweep (--no-build) never touches the shared build/, on Tiny
Shakespeare with a tiny model on one thread (OpenMP threads only contend on a busy machine; the
losses do not depend on the thread count). The GPU side (make per variant, one run per GPU, the
GPU trainer's output lines) is exercised with a fake `make`, a fake `nvidia-smi` listing two GPUs
and a fake `train_gpt2cu` that prints the CUDA trainer's lines.
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "scripts" / "sweep.py"
BIN = Path(os.environ.get("TRAIN_GPT2", REPO / "build" / "cpu" / "train_gpt2"))
TRAIN = REPO / "data" / "tinyshakespeare" / "tiny_shakespeare_train.bin"
VAL = REPO / "data" / "tinyshakespeare" / "tiny_shakespeare_val.bin"
TINY = "-e d2,c32,h2,t32 -t 32 -b 2 -x 12 -v 4 -m 2 -s 0 -threads 1"  # about 0.1 s a step
NAN_FLAGS = "-x 4 -l 1e9 -u 0 -gc 0"  # checked below to end in `train loss is nan` at step 2

needs_trainer = pytest.mark.skipif(not (BIN.exists() and TRAIN.exists() and VAL.exists()),
                                   reason="needs build/cpu/train_gpt2 and the Tiny Shakespeare shards (make data)")


def load_script(name):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_sweep(path, runs, baseline="a", flags=TINY, extra=""):
    """A sweep file with the tiny shared flags; runs are (label, build, flags) tuples."""
    text = (f'[sweep]\nname = "t"\nbaseline = "{baseline}"\nflags = "{flags}"\n'
            f'train = "{TRAIN}"\nval = "{VAL}"\n{extra}\n')
    for label, build, run_flags in runs:
        text += f'\n[[run]]\nlabel = "{label}"\nbuild = "{build}"\nflags = "{run_flags}"\n'
    path.write_text(text)
    return path


def sweep_cmd(sweep_file, out, *args):
    return [sys.executable, str(SWEEP), str(sweep_file), "--out", str(out), *map(str, args)]


def run_sweep(sweep_file, out, *args, env=None, timeout=120):
    p = subprocess.run(sweep_cmd(sweep_file, out, *args), capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=REPO)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="session")
def cpu_build(tmp_path_factory):
    """A build folder holding a copy of the CPU trainer, for --build-dir DIR --no-build."""
    if not (BIN.exists() and TRAIN.exists() and VAL.exists()):
        pytest.skip("needs build/cpu/train_gpt2 and the Tiny Shakespeare shards (make data)")
    build = tmp_path_factory.mktemp("build")
    (build / "cpu").mkdir()
    shutil.copy2(BIN, build / "cpu" / "train_gpt2")
    return build


def report_rows(report):
    """{label: {column: cell}} from report.md's table."""
    lines = [l for l in Path(report).read_text().splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        row = dict(zip(header, cells))
        rows[re.match(r"\[([^]]+)\]", row["run"]).group(1)] = row
    return rows


def stdout_values(log):
    """(val losses {step: loss}, step times [ms]) printed by the trainer."""
    text = Path(log).read_text()
    val = {int(s): float(v) for s, v in re.findall(r"^step\s+(\d+) \| val loss (\S+)$", text, re.M)}
    ms = [float(x) for x in re.findall(r"^step\s+\d+/\d+ \|.*\| ([0-9.]+) ms \|", text, re.M)]
    return val, ms


def assert_png(path, min_width=300):
    """A PNG that decodes to an image of some size with more than one colour."""
    import matplotlib.image

    assert path.stat().st_size > 2000, path
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[1] >= min_width, img.shape
    assert img[..., :3].std() > 0.01, f"{path} is blank"


# ------------------------------------------------------------------------------------------------
# A two-run sweep with the CPU trainer


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, cpu_build):
    tmp = tmp_path_factory.mktemp("two")
    sweep = write_sweep(tmp / "s.toml", [("a", "cpu", ""), ("b", "cpu", "-l 3e-3")])
    out = tmp / "out"
    code, text = run_sweep(sweep, out, "--build-dir", cpu_build, "--no-build")
    assert code == 0, text
    return sweep, out, text


@needs_trainer
def test_two_run_sweep_records_and_reports_each_run(two_runs):
    _, out, text = two_runs
    assert "[2/2] b: ok" in text
    rows = report_rows(out / "report.md")
    assert list(rows) == ["a", "b"]
    val_a, ms_a = stdout_values(out / "a" / "stdout.log")
    val_b, _ = stdout_values(out / "b" / "stdout.log")
    assert sorted(val_a) == [0, 4, 8, 12] and val_b[12] < val_a[12] - 0.1  # the higher lr learns faster
    for label, val in (("a", val_a), ("b", val_b)):
        row = rows[label]
        assert (row["build"], row["outcome"], row["exit"], row["skipped"]) == ("cpu", "ok", "0", "0")
        assert row["final val"] == f"{val[12]:.4f}"
        assert row["best val"] == f"{min(val.values()):.4f}"
        assert "fp32 (CPU)" in row["numeric config"]
        record = json.loads((out / label / "run.json").read_text())
        assert (record["exit_status"], record["outcome"]) == (0, "ok")
        assert record["command"][-2:] == ["-o", str(out / label)]
    assert rows["a"]["Δ val"] == "+0.0000" and rows["a"]["× baseline"] == "1.000"
    assert rows["b"]["Δ val"] == f"{val_b[12] - val_a[12]:+.4f}"
    assert rows["a"]["median step (ms)"] == f"{sorted(ms_a[3:])[len(ms_a[3:]) // 2]:.2f}"  # after 3 warm-up steps
    summary = {r["label"]: r for r in json.loads((out / "summary.json").read_text())["runs"]}
    assert summary["b"]["tok_ratio"] == pytest.approx(summary["b"]["tok_s"] / summary["a"]["tok_s"])
    assert rows["b"]["× baseline"] == f"{summary['b']['tok_ratio']:.3f}"
    assert "-l 3e-3 -o " + str(out / "b") in (out / "report.md").read_text()  # the full command line


@needs_trainer
def test_two_run_sweep_plots_loss_and_speed(two_runs):
    _, out, _ = two_runs
    assert_png(out / "loss.png", min_width=800)
    assert_png(out / "speed.png")


@needs_trainer
def test_report_only_regenerates_the_report_from_the_logs(two_runs):
    sweep, out, _ = two_runs
    before = report_rows(out / "report.md")
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/stdout.log")}
    for name in ("report.md", "loss.png", "speed.png", "summary.json"):
        (out / name).unlink()
    code, text = run_sweep(sweep, out, "--report-only")
    assert code == 0, text
    assert report_rows(out / "report.md") == before
    assert_png(out / "loss.png", min_width=800)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/stdout.log")} == stamps


@needs_trainer
def test_a_finished_sweep_runs_nothing_again(two_runs, cpu_build):
    sweep, out, _ = two_runs
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*.log")}
    code, text = run_sweep(sweep, out, "--build-dir", cpu_build, "--no-build")
    assert code == 0, text
    assert "skip a" in text and "skip b" in text and "start " not in text
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*.log")} == stamps


# ------------------------------------------------------------------------------------------------
# Interruption and resume


def trainer_pids(needle):
    """Live (not zombie) processes whose command line contains needle."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmdline and "sweep.py" not in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@needs_trainer
def test_a_killed_sweep_resumes_without_redoing_finished_runs(tmp_path, cpu_build):
    sweep = write_sweep(tmp_path / "s.toml", [("a", "cpu", "-x 2"), ("b", "cpu", "-x 8")])
    out = tmp_path / "out"
    log_b = out / "b" / "stdout.log"
    proc = subprocess.Popen(sweep_cmd(sweep, out, "--build-dir", cpu_build, "--no-build"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: log_b.exists() and "step     2/8" in log_b.read_text(), 60, "run b's second step")
        assert trainer_pids(str(out / "b")), "b's trainer should be running"
        proc.kill()  # SIGKILL: no clean-up in the sweep at all
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    # the trainer does not outlive the sweep (it gets SIGTERM as its parent dies)
    wait_for(lambda: not trainer_pids(str(out / "b")), 15, "b's trainer to end")
    assert (out / "a" / "run.json").exists() and not (out / "b" / "run.json").exists()
    kept = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "a").iterdir()}

    code, text = run_sweep(sweep, out, "--build-dir", cpu_build, "--no-build")
    assert code == 0, text
    assert "skip a" in text and "start b" in text and "start a" not in text
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "a").iterdir()} == kept
    record = json.loads((out / "b" / "run.json").read_text())
    assert (record["exit_status"], record["outcome"]) == (0, "ok")
    log = log_b.read_text()
    assert log.count("step     1/8 ") == 1 and "step     8/8 " in log  # from scratch, to the end
    rows = report_rows(out / "report.md")
    assert rows["a"]["outcome"] == rows["b"]["outcome"] == "ok"


# ------------------------------------------------------------------------------------------------
# Divergence


@needs_trainer
def test_diverged_and_failed_runs_are_reported_and_the_sweep_succeeds(tmp_path, cpu_build):
    sweep = write_sweep(tmp_path / "s.toml", [("a", "cpu", "-x 4"), ("blowup", "cpu", NAN_FLAGS), ("bad", "cpu", "-zz 1")])
    out = tmp_path / "out"
    code, text = run_sweep(sweep, out, "--build-dir", cpu_build, "--no-build")
    assert code == 0, text
    assert "error: step 2: train loss is nan" in (out / "blowup" / "stdout.log").read_text()
    record = json.loads((out / "blowup" / "run.json").read_text())
    assert (record["exit_status"], record["outcome"]) == (1, "diverged")
    rows = report_rows(out / "report.md")
    assert rows["a"]["outcome"] == "ok"
    assert rows["blowup"]["outcome"] == "**diverged** (nan at step 2)"
    assert (rows["blowup"]["final val"], rows["blowup"]["Δ val"], rows["blowup"]["exit"]) == ("–", "–", "1")
    assert (rows["bad"]["outcome"], rows["bad"]["exit"]) == ("**failed**", "1")
    assert json.loads((out / "bad" / "run.json").read_text())["outcome"] == "failed"
    report = (out / "report.md").read_text()
    assert "## Problems" in report and "train loss is nan" in report and "`error: -zz: unknown flag" in report
    assert_png(out / "loss.png", min_width=800)


# ------------------------------------------------------------------------------------------------
# Sweep-file validation (nothing runs, nothing is written)


GOOD_RUN = '[[run]]\nlabel = "a"\nbuild = "cpu"\n'


@pytest.mark.parametrize("text, needle", [
    ('[sweep]\nname = "t"\nbaseline = "a"\ncolour = "red"\n' + GOOD_RUN, "unknown key(s) colour"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n' + GOOD_RUN + 'lr = 1\n', "run 'a': unknown key(s) lr"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n' + GOOD_RUN + GOOD_RUN, "duplicate label(s) a"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n[[run]]\nlabel = "a"\nbuild = "bf17"\n', "unknown build 'bf17'"),
    ('[sweep]\nname = "t"\nbaseline = "z"\n' + GOOD_RUN, "baseline 'z' is not the label of a run"),
    ('[sweep]\nname = "t"\n' + GOOD_RUN, "missing key 'baseline'"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n', "no [[run]] entries"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n[[run]]\nlabel = "a"\nbuild = "cpu"\nflags = "-o x"\n', "-o is not allowed"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n[[run]]\nlabel = "a/b"\nbuild = "cpu"\n', "label must be a folder name"),
    ('[sweep]\nname = "t"\nbaseline = "a"\ngpus = 0\n' + GOOD_RUN, "gpus must be at least 1"),
    ('[sweep]\nname = "t"\nbaseline = "a"\n[[run]]\nlabel = "a"\nbuild = "cpu"\nenv = "X=1"\n', "env must be a table"),
    ('[sweep]\nname = "t"\nbaseline = a\n', "not valid TOML"),
], ids=["unknown-sweep-key", "unknown-run-key", "duplicate-label", "unknown-build", "missing-baseline-run",
        "no-baseline", "no-runs", "forbidden-flag", "bad-label", "zero-gpus", "env-not-table", "bad-toml"])
def test_sweep_file_errors_name_the_file_and_the_problem(tmp_path, text, needle):
    sweep = tmp_path / "bad.toml"
    sweep.write_text(text)
    code, out = run_sweep(sweep, tmp_path / "out", "--dry-run")
    assert code == 1
    assert out.startswith(f"error: {sweep}:"), out
    assert needle in out, out
    assert not (tmp_path / "out").exists()


def test_the_precision_sweep_file_is_valid_and_builds_each_variant_once(tmp_path):
    code, text = run_sweep(REPO / "scripts" / "sweeps" / "precision_d12.toml", tmp_path / "out", "--dry-run")
    assert code == 0, text
    builds = re.findall(r"^build: make -j\d+ (\S+)(.*)$", text, re.M)
    assert builds == [("build/bf16/train_gpt2cu", ""), ("build/q115/train_gpt2cu", " ENABLE_Q115=1"),
                      ("build/q115_tf/train_gpt2cu", " ENABLE_Q115=1 SF16_TRUE_FORWARD=1"),
                      ("build/fp8/train_gpt2cu", " FP8=1"), ("build/tcfp12/train_gpt2cu", " TCFP12=1")]
    runs = dict(re.findall(r"^(\S+) \(run\): (.*)$", text, re.M))
    assert list(runs) == ["bf16", "sf16", "sf16_tf", "fp8", "tcfp12", "tcfp12_ef", "tcfp12_abd"]
    bench = "-e d12 -b 64 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -c 0.1 -v 50 -m 10 -s 0"
    assert all(bench in cmd and "gutenberg_val_*.bin" in cmd for cmd in runs.values())
    assert "--tcfp-ef 1" in runs["tcfp12_ef"] and "--tcfp-abd 1" in runs["tcfp12_abd"]
    assert not (tmp_path / "out").exists()


def test_a_foreign_folder_in_the_way_of_a_run_is_left_alone(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "t"\nbaseline = "a"\n' + GOOD_RUN)
    (tmp_path / "out" / "a").mkdir(parents=True)
    (tmp_path / "out" / "a" / "notes.txt").write_text("mine")
    code, out = run_sweep(sweep, tmp_path / "out")
    assert code == 1 and f"error: {tmp_path / 'out' / 'a'}: exists and is not a run folder" in out, out
    assert (tmp_path / "out" / "a" / "notes.txt").read_text() == "mine"


def test_rerun_of_an_unknown_label_is_an_error(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "t"\nbaseline = "a"\n' + GOOD_RUN)
    code, out = run_sweep(sweep, tmp_path / "out", "--rerun", "nope")
    assert code == 1 and "--rerun nope: no run has this label" in out


# ------------------------------------------------------------------------------------------------
# GPU side with fakes: make per variant, one run per GPU, the CUDA trainer's lines


FAKE_MAKE = r'''#!{python}
import os, shutil, sys
with open({calls!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
if {fail!r}:
    for i in range(30):
        print(f"line {{i}}")
    print("fatal: nvcc exploded")
    sys.exit(2)
target = next(a for a in sys.argv[1:] if a.endswith("/train_gpt2cu"))
os.makedirs(os.path.dirname(target), exist_ok=True)
shutil.copy({trainer!r}, target)
os.chmod(target, 0o755)
'''

FAKE_TRAINER = r'''#!{python}
# Prints what train_gpt2cu prints (numeric config, step and val lines, median, memory) at a speed set
# by its variant folder, and writes main.log, a tensor_stats.csv (bf16) and its start/end times.
import json, os, sys, time
args = sys.argv[1:]
opt = {{a: b for a, b in zip(args, args[1:]) if a.startswith("-")}}
out, steps = opt["-o"], int(opt["-x"])
variant = os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0])))
tok = {{"bf16": 650000, "fp8": 715000}}[variant]
os.makedirs(out, exist_ok=True)
t0 = time.time()
print(f"numeric config: precision=bf16 gemm={{variant}} fake=1", flush=True)
if variant == "fp8":
    print("FP8 (E4M3 activations and weights, E5M2 gradients) options: block=0 delayed=" + opt.get("--fp8-delayed", "0"))
with open(os.path.join(out, "main.log"), "w") as log:
    for step in range(steps + 1):
        if step % 2 == 0 or step == steps:
            val = 10.0 - 0.1 * step - (0.05 if variant == "fp8" else 0.0)
            print(f"step {{step:5d}} | val loss {{val:.6f}}")
            log.write(f"s:{{step}} tel:{{val:.6f}}\n")
        if step == steps:
            break
        time.sleep(0.15)
        note = " | skipped (loss z=9.00)" if step == 2 else ""
        print(f"step {{step + 1:5d}}/{{steps}} | loss {{10.5 - 0.1 * step:.6f}} | norm 1.0000 | lr 6.00e-04 | "
              f"{{65536e3 / tok:.2f}} ms | {{tok}} tok/s | MFU 40.0%{{note}}", flush=True)
        log.write(f"s:{{step + 1}} trl:{{10.5 - 0.1 * step:.6f}} lr:0.0006 norm:1.0\n")
print(f"step {{steps:5d}} | gpu memory 1000 / 80000 MiB (peak seen 1234)")
print(f"median step {{65536e3 / tok:.2f}} ms, {{tok}} tok/s, MFU 40.0% over 1 steps after 3 warm-up steps")
print("device memory in use at the end: 2345 MiB")
if variant == "bf16":
    with open(os.path.join(out, "tensor_stats.csv"), "w") as f:
        f.write("step,layer,tensor,kind,numel,amax,rms,zero_frac,below_bf16,below_fp16,below_e4m3,nan,inf\n")
        for s in (1, 2, 4):
            for layer in (0, 1):
                f.write(f"{{s}},{{layer}},qkv,act,96,{{s + layer}},0.5,0,0,0,{{0.01 * s}},0,0\n")
            f.write(f"{{s}},-1,logits,act,50,{{10 * s}},2,0,0,0,0,0,0\n")
with open(os.path.join(out, "fake.json"), "w") as f:
    json.dump({{"start": t0, "end": time.time(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}}, f)
'''


@pytest.fixture
def fake_gpu_env(tmp_path):
    """(env, make-calls file, build dir): fake make, nvidia-smi with 2 GPUs, fake trainer."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n")
    trainer = tmp_path / "fake_trainer.py"
    trainer.write_text(FAKE_TRAINER.format(python=sys.executable))
    calls = tmp_path / "make_calls.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"

    def make(fail=False):
        script = tmp_path / ("fake_make_fail" if fail else "fake_make")
        script.write_text(FAKE_MAKE.format(python=sys.executable, calls=str(calls), fail=fail, trainer=str(trainer)))
        for path in (smi, script):
            path.chmod(0o755)
        return {**env, "MAKE": str(script)}

    return make, calls, tmp_path / "build"


def test_gpu_runs_build_each_variant_once_and_share_the_gpus(tmp_path, fake_gpu_env):
    make, calls, build = fake_gpu_env
    flags = "-e d12 -x 6 -v 2"  # 6 x 0.15 s: long enough that the first two surely overlap
    sweep = write_sweep(tmp_path / "s.toml", [("g1", "bf16", ""), ("g2", "fp8", ""), ("g3", "fp8", "--fp8-delayed 4")],
                        baseline="g1", flags=flags)
    out = tmp_path / "out"
    code, text = run_sweep(sweep, out, "--build-dir", build, env=make())
    assert code == 0, text
    ncpu = os.cpu_count() or 1
    assert calls.read_text().splitlines() == [f"-j{ncpu} BUILD={build} {build}/bf16/train_gpt2cu",
                                              f"-j{ncpu} BUILD={build} {build}/fp8/train_gpt2cu FP8=1"]
    fake = {g: json.loads((out / g / "fake.json").read_text()) for g in ("g1", "g2", "g3")}
    assert (fake["g1"]["cvd"], fake["g2"]["cvd"]) == ("0", "1")
    assert max(fake["g1"]["start"], fake["g2"]["start"]) < min(fake["g1"]["end"], fake["g2"]["end"])  # at once
    assert fake["g3"]["start"] >= min(fake["g1"]["end"], fake["g2"]["end"])  # waits for a free GPU
    assert json.loads((out / "g1" / "run.json").read_text())["command_line"].startswith("CUDA_VISIBLE_DEVICES=0 ")
    rows = report_rows(out / "report.md")
    assert rows["g1"]["numeric config"] == "`precision=bf16 gemm=bf16 fake=1`"
    assert rows["g3"]["numeric config"].endswith("options: block=0 delayed=4`")
    assert (rows["g1"]["median step (ms)"], rows["g1"]["tok/s"]) == (f"{65536e3 / 650000:.2f}", "650,000")
    assert rows["g2"]["× baseline"] == f"{715000 / 650000:.3f}"
    assert rows["g2"]["final val"] == "9.3500" and rows["g2"]["Δ val"] == "-0.0500"  # fake: 10 - 0.6 - 0.05
    assert rows["g1"]["peak / end MiB"] == "1234 / 2345" and rows["g1"]["skipped"] == "1"
    report = (out / "report.md").read_text()
    heatmaps = re.findall(r"\]\((g1/heatmaps/[^)]+\.png)\)", report)
    assert sorted(heatmaps) == ["g1/heatmaps/amax_act_grid.png", "g1/heatmaps/below_e4m3_act_grid.png"]
    for png in heatmaps:
        assert_png(out / png)


def test_a_failed_build_stops_the_sweep_with_the_make_output_tail(tmp_path, fake_gpu_env):
    make, _, build = fake_gpu_env
    sweep = write_sweep(tmp_path / "s.toml", [("g1", "bf16", "")], baseline="g1", flags="-x 4")
    out = tmp_path / "out"
    code, text = run_sweep(sweep, out, "--build-dir", build, env=make(fail=True))
    assert code == 1
    assert "error: build bf16 failed (make exit 2" in text
    assert "line 29" in text and "fatal: nvcc exploded" in text and "line 2\n" not in text  # the tail only
    assert not (out / "g1").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_trainers_and_leaves_no_record(tmp_path, fake_gpu_env, signum):
    make, _, build = fake_gpu_env
    sweep = write_sweep(tmp_path / "s.toml", [("g1", "bf16", ""), ("g2", "bf16", "")], baseline="g1",
                        flags="-x 40 -v 2", extra="gpus = 1")  # one GPU of the two: one run at a time
    out = tmp_path / "out"
    log = out / "g1" / "stdout.log"
    proc = subprocess.Popen(sweep_cmd(sweep, out, "--build-dir", build), cwd=REPO, env=make(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: log.exists() and "step     2/40" in log.read_text(), 60, "g1's second step")
        assert trainer_pids(str(out / "g1"))
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
    finally:
        proc.kill()
        proc.wait()
    assert not trainer_pids(str(out / "g1"))  # stopped before the sweep exited
    assert not (out / "g1" / "run.json").exists() and not (out / "g2").exists()
    rows = report_rows(out / "report.md")
    assert (rows["g1"]["outcome"], rows["g2"]["outcome"]) == ("interrupted", "pending")


# ------------------------------------------------------------------------------------------------
# plot_stats.py


HEADER = "step,layer,tensor,kind,numel,amax,rms,zero_frac,below_bf16,below_fp16,below_e4m3,nan,inf"


def synthetic_stats(path):
    """3 steps x 3 layers of qkv (amax = 10 * step + layer), model-level logits, one weight and grad."""
    lines = [HEADER]
    for step in (1, 5, 10):
        lines += [f"{step},{layer},qkv,act,768,{10 * step + layer},0.5,0.01,0,0.001,0.02,0,0" for layer in range(3)]
        lines.append(f"{step},-1,logits,act,5000,{step * 2.5},3.0,0,0,0,0,0,0")
        lines.append(f"{step},-1,wte,weight,1000,0.3,nan,0,0,0,0.1,0,0")
        lines.append(f"{step},-1,wte,grad,1000,0.001,0.0001,0.5,0,0.2,0.4,0,0")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plot_stats_writes_heatmaps_layer_by_step(tmp_path):
    ps = load_script("plot_stats")
    csv_path = synthetic_stats(tmp_path / "tensor_stats.csv")
    layers, steps, matrix = ps.heatmap_matrix(ps.read_stats(csv_path), "act", "qkv", "amax")
    assert (layers, steps) == ([0, 1, 2], [1, 5, 10])
    assert matrix[2][1] == 52.0  # layer 2, step 5
    assert ps.main([str(csv_path), "--column", "amax", "--tensor", "qkv", "--out", str(tmp_path / "one"), "--log"]) == 0
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["amax_act_qkv.png"]
    assert_png(tmp_path / "one" / "amax_act_qkv.png")
    assert ps.main([str(csv_path), "--column", "below_e4m3", "--grid", "--out", str(tmp_path / "grid")]) == 0
    assert sorted(p.name for p in (tmp_path / "grid").iterdir()) == [
        "below_e4m3_act_grid.png", "below_e4m3_grad_grid.png", "below_e4m3_weight_grid.png"]
    assert_png(tmp_path / "grid" / "below_e4m3_act_grid.png")


@pytest.mark.parametrize("edit, needle", [
    (lambda ls: ls[:2] + ["5,0,qkv,act,768,1.0,0.5"] + ls[2:], ":3: 7 fields, the header has 13"),
    (lambda ls: ls[:3] + [ls[3].replace(",12,", ",big,")] + ls[4:], ":4: amax: 'big' is not a number"),
    (lambda ls: ls[:2] + [ls[2].replace(",act,", ",acts,")] + ls[3:], ":3: kind: 'acts' is not one of"),
    (lambda ls: [ls[0].replace(",rms", "")] + ls[1:], ":1: header lacks column(s) rms"),
    (lambda ls: [], ":1: empty file"),
])
def test_plot_stats_rejects_a_malformed_csv_naming_file_and_line(tmp_path, capsys, edit, needle):
    ps = load_script("plot_stats")
    csv_path = synthetic_stats(tmp_path / "tensor_stats.csv")
    csv_path.write_text("\n".join(edit(csv_path.read_text().splitlines())) + "\n")
    assert ps.main([str(csv_path), "--out", str(tmp_path / "png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {csv_path}") and needle in err, err
    assert not list(tmp_path.glob("png/*.png"))
