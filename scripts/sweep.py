#!/usr/bin/env python3
"""Run a precision sweep: build the trainer variants it needs, run each configuration, and write a
report comparing them with a baseline (loss, speed, memory, divergence, numeric configuration).

    .venv/bin/python scripts/sweep.py SWEEP.toml [--out DIR] [--dry-run] [--rerun LABEL]...
                                      [--report-only] [--build-dir DIR] [--no-build]

--dry-run prints the make and trainer commands and changes nothing; --build-dir DIR builds into (and
runs from) DIR instead of build/ (make BUILD=DIR); --no-build runs the binaries found there as they
are. Exit status: 0 when every run has its record (diverged and failed runs included), 1 on a
sweep-file or build error, 128 + N when signal N stopped it.

Sweep file (TOML; relative paths are relative to the repository root, where make and the trainers
run; --out is relative to the current folder and replaces [sweep] out):

    [sweep]
    name = "precision_d12"                 # required; the report's title
    out = "out/precision_d12"              # output folder [out/<name>]
    baseline = "bf16"                      # required: the label the others are compared with
    flags = "-e d12 -b 64 -t 1024 -x 300"  # trainer flags of every run
    train = "data/gutenberg/gutenberg_train_*.bin"   # -i (optional: the trainer's default)
    val = "data/gutenberg/gutenberg_val_*.bin"       # -j (optional)
    gpus = 2                               # optional: use at most 2 GPUs, or a list of ids [0, 3]

    [[run]]
    label = "bf16"                         # required, unique: the run's folder <out>/<label>
    build = "bf16"                         # required: bf16 fp16 fp32 q115 q115_tf fp8 tcfp12 tcast, or cpu
    flags = "--tcfp-ef 1"                  # optional: appended after the shared flags (last one wins)
    env = { NCCL_DEBUG = "WARN" }          # optional: extra environment of the trainer

Any other key, a duplicate label, an unknown build, a missing baseline, `-o` or `-y` in flags stop
the sweep with `error: <file>: <problem>` before anything runs.

What it does. Builds each variant the pending runs need once, in file order, with
`make -j<cores> [BUILD=<build-dir>] <build-dir>/<variant>/train_gpt2cu <make variables>` (`cpu`:
`make <build-dir>/cpu/train_gpt2`; $MAKE replaces make), output to <out>/_build/<variant>.log; a
failed build stops with the tail of that log. Then runs each run as
`<binary> <sweep flags> -i <train> -j <val> <run flags> -o <out>/<label>` from the repository root,
stdout and stderr to <out>/<label>/stdout.log: one at a time, or, with several GPUs visible
(nvidia-smi -L, or $CUDA_VISIBLE_DEVICES when set), one run per GPU at once (the child gets
CUDA_VISIBLE_DEVICES=<id>; a cpu run takes a slot like a GPU run so that timings are not disturbed).
The terminal shows runs done / total, the latest step of each active run and an ETA from the step
times seen.

Completion record <out>/<label>/run.json (written atomically when the trainer exited by itself):
    {"label", "build", "outcome": "ok" | "diverged" | "failed", "exit_status", "signal",
     "wall_s", "started", "finished", "command": [argv], "command_line", "cwd", "env": {added vars}}
A run with a run.json is skipped by the next invocation (--rerun LABEL redoes it); a run without one
(Ctrl-C, SIGTERM, the sweep killed) is started again from scratch, its folder emptied. On SIGINT or
SIGTERM the sweep stops its trainers, writes the report and exits with 128 + the signal number; the
trainers also get SIGTERM if the sweep dies without cleaning up (Linux). A run that diverges (the
trainer's `error: step N: train loss is nan` and exit 1) or fails is recorded as such and the sweep
goes on: its exit status is 0 once every run has a record.

Report, regenerated from the files in the out folder alone (--report-only does only that):
    report.md     one row per run: final and best val loss, difference to the baseline's final val
                  loss, median step time and tok/s (ratio to the baseline), peak / end device memory,
                  divergence and skipped steps, exit status, the numeric configuration the run printed;
                  then problems, tensor-statistics heatmaps and the full command lines
    loss.png      train loss, validation loss, and validation loss minus the baseline's, of every run
    speed.png     median tok/s per run, ratio to the baseline on each bar
    summary.json  the numbers of the table, for scripts
    <label>/heatmaps/*.png  for runs that wrote <out>/<label>/tensor_stats.csv (scripts/plot_stats.py)
Sources: main.log (train/val losses, read with scripts/plot_loss.py's parser) and stdout.log (step
lines `step N/M | loss | norm | lr | X ms | Y tok/s [| MFU Z%][| skipped (...)]`, `numeric config:`,
`<FP8|TCFP-12 ...> options:`, `median step X ms, Y tok/s`, `device memory in use at the end: X MiB`,
`-lg`'s `(peak seen X)`, `error: ...`).
"""
import argparse
import ctypes
import datetime
import importlib
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent

# build name -> make variables (the Makefile names the variant folder after them); cpu is the CPU trainer
VARIANTS = {
    "bf16": [],
    "fp16": ["PRECISION=FP16"],
    "fp32": ["PRECISION=FP32"],
    "q115": ["ENABLE_Q115=1"],
    "q115_tf": ["ENABLE_Q115=1", "SF16_TRUE_FORWARD=1"],
    "fp8": ["FP8=1"],
    "tcfp12": ["TCFP12=1"],
    "tcast": ["TCAST=1"],
    "cpu": None,
}
SWEEP_KEYS = {"name", "out", "baseline", "flags", "train", "val", "gpus"}
RUN_KEYS = {"label", "build", "flags", "env"}
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED_LABELS = {"report.md", "loss.png", "speed.png", "summary.json"}
FORBIDDEN_FLAGS = {"-o": "the sweep sets -o <out>/<label>", "-y": "a run is redone from scratch, never resumed"}
RECORD = "run.json"
STDOUT = "stdout.log"
BUILD_LOGS = "_build"
WARMUP_STEPS = 3  # as the GPU trainer's median: its first 3 steps include allocation and autotuning
POLL_S = 0.25
STATUS_EVERY_S = 30.0  # progress line interval when stdout is not a terminal
TERM_GRACE_S = 10.0

STEP_RE = re.compile(r"^step\s+(\d+)/(-?\d+) \| loss (\S+) \| norm (\S+) \| lr (\S+) \| ([0-9.]+) ms \| ([0-9.]+) tok/s(.*)$")
NUMERIC_RE = re.compile(r"^numeric config: (.*)$")
LOWP_RE = re.compile(r"^((?:FP8|TCFP-12)\b.*?) options: (.*)$")
CONFIG_ROW_RE = re.compile(r"^\| (precision[^|]*?)\s*\| (.*?)\s*\|$")  # the CPU trainer's config table
MEDIAN_RE = re.compile(r"^median step ([0-9.]+) ms, ([0-9.]+) tok/s")
MEM_END_RE = re.compile(r"^device memory in use at the end: ([0-9.]+) MiB")
MEM_PEAK_RE = re.compile(r"\(peak seen ([0-9.]+)\)")
ERROR_RE = re.compile(r"^error: (.*)$")
NONFINITE_RE = re.compile(r"loss is (-?nan|-?inf)\b", re.IGNORECASE)
DIVERGED_STEP_RE = re.compile(r"step (\d+): train loss is")


class SweepError(Exception):
    """A problem that stops the sweep; printed as `error: <message>`."""


# ------------------------------------------------------------------------------------------------
# Sweep file


@dataclass(frozen=True)
class Run:
    label: str
    build: str
    flags: tuple
    env: tuple  # (name, value) pairs


@dataclass(frozen=True)
class Sweep:
    path: Path
    name: str
    out: Path
    baseline: str
    flags: tuple
    train: str | None
    val: str | None
    gpus: object  # None, a count, or a list of device ids (str)
    runs: tuple


def _string(where, table, key, required=False, default=None):
    """table[key] as a str (or default); SweepError naming where otherwise."""
    if key not in table:
        if required:
            raise SweepError(f"{where}: missing key '{key}'")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise SweepError(f"{where}: {key} must be a string, not {type(value).__name__}")
    return value


def _flags(where, text):
    """Shell-split flags, rejecting those the sweep owns."""
    try:
        flags = shlex.split(text or "")
    except ValueError as e:
        raise SweepError(f"{where}: flags: {e}") from None
    for flag in flags:
        if flag in FORBIDDEN_FLAGS:
            raise SweepError(f"{where}: flags: {flag} is not allowed ({FORBIDDEN_FLAGS[flag]})")
    return tuple(flags)


def _env(where, value):
    """An env table as sorted (name, str value) pairs; numbers are accepted and written as text."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise SweepError(f"{where}: env must be a table, e.g. env = {{ NAME = \"value\" }}")
    pairs = []
    for name, v in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SweepError(f"{where}: env: {name!r} is not a variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise SweepError(f"{where}: env: {name} must be a string or a number")
        pairs.append((name, str(v)))
    return tuple(sorted(pairs))


def _gpus(where, value):
    """[sweep] gpus: None, a positive count, or a non-empty list of device ids."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise SweepError(f"{where}: gpus must be at least 1")
        return value
    if isinstance(value, list) and value and all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        ids = [str(v) for v in value]
        if len(set(ids)) != len(ids):
            raise SweepError(f"{where}: gpus lists a device twice")
        return ids
    raise SweepError(f"{where}: gpus must be a count or a list of device ids")


def _unknown_keys(where, table, allowed):
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SweepError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _parse_run(path, index, table):
    where = f"{path}: run {index + 1}"
    if not isinstance(table, dict):
        raise SweepError(f"{where}: each [[run]] must be a table")
    label = _string(where, table, "label", required=True)
    where = f"{path}: run '{label}'"
    _unknown_keys(where, table, RUN_KEYS)
    if not LABEL_RE.match(label) or label in RESERVED_LABELS:
        raise SweepError(f"{where}: label must be a folder name of letters, digits, '.', '_', '-' "
                         f"(not {', '.join(sorted(RESERVED_LABELS))})")
    build = _string(where, table, "build", required=True)
    if build not in VARIANTS:
        raise SweepError(f"{where}: unknown build '{build}' (known: {', '.join(VARIANTS)})")
    return Run(label, build, _flags(where, _string(where, table, "flags", default="")), _env(where, table.get("env")))


def load_sweep(path, out_override=None):
    """Read and validate a sweep file; SweepError naming the file and the problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise SweepError(f"{path}: cannot read ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{path}: not valid TOML: {e}") from None
    _unknown_keys(str(path), data, {"sweep", "run"})
    head = data.get("sweep")
    if not isinstance(head, dict):
        raise SweepError(f"{path}: missing the [sweep] table")
    where = f"{path}: [sweep]"
    _unknown_keys(where, head, SWEEP_KEYS)
    name = _string(where, head, "name", required=True)
    runs_data = data.get("run")
    if not isinstance(runs_data, list) or not runs_data:
        raise SweepError(f"{path}: no [[run]] entries")
    runs = tuple(_parse_run(path, i, t) for i, t in enumerate(runs_data))
    labels = [r.label for r in runs]
    duplicates = sorted({x for x in labels if labels.count(x) > 1})
    if duplicates:
        raise SweepError(f"{path}: duplicate label(s) {', '.join(duplicates)}")
    baseline = _string(where, head, "baseline", required=True)
    if baseline not in labels:
        raise SweepError(f"{path}: baseline '{baseline}' is not the label of a run (labels: {', '.join(labels)})")
    out = Path(out_override).resolve() if out_override else REPO / _string(where, head, "out", default=f"out/{name}")
    return Sweep(path, name, out.resolve(), baseline, _flags(where, _string(where, head, "flags", default="")),
                 _string(where, head, "train"), _string(where, head, "val"), _gpus(where, head.get("gpus")), runs)


# ------------------------------------------------------------------------------------------------
# Commands


def display_path(path):
    """A path as the commands show it: relative to the repository root when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def binary_path(build, build_dir):
    return Path(build_dir) / build / ("train_gpt2" if build == "cpu" else "train_gpt2cu")


def make_command(build, build_dir, custom_build_dir):
    """The make invocation of one variant (BUILD= only when not the Makefile's default)."""
    make = shlex.split(os.environ.get("MAKE", "make"))
    target = display_path(binary_path(build, build_dir))
    build_var = [f"BUILD={display_path(build_dir)}"] if custom_build_dir else []
    if build == "cpu":
        return make + build_var + [target]
    return make + [f"-j{os.cpu_count() or 1}"] + build_var + [target] + VARIANTS[build]


def run_command(sweep, run, build_dir):
    """argv of one run: shared flags, data, the run's flags (later flags win), then -o."""
    data = (["-i", sweep.train] if sweep.train else []) + (["-j", sweep.val] if sweep.val else [])
    return ([display_path(binary_path(run.build, build_dir)), *sweep.flags, *data, *run.flags,
             "-o", display_path(sweep.out / run.label)])


def same_command(recorded, argv):
    """Whether a recorded argv ran what argv runs: the same variant and flags (the build folder may differ)."""
    key = lambda a: (Path(a[0]).parent.name, Path(a[0]).name, list(a[1:])) if a else None  # noqa: E731
    return key(recorded or []) == key(argv)


def command_line(argv, env=None):
    """A shell line with the added environment in front."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join(prefix + [shlex.quote(a) for a in argv])


def max_steps(argv):
    """The -x of an argv (the last one wins, as in the trainer's parser), None if absent or -1."""
    value = None
    for flag, arg in zip(argv, argv[1:]):
        if flag == "-x":
            value = arg
    try:
        steps = int(value) if value is not None else None
    except ValueError:
        return None
    return steps if steps and steps > 0 else None


# ------------------------------------------------------------------------------------------------
# Logs


@dataclass
class LogStats:
    """What a run's stdout.log says besides the losses."""
    step_ms: list = field(default_factory=list)
    step_tok_s: list = field(default_factory=list)
    last_step: int = 0
    total_steps: int | None = None
    skipped: int = 0
    numeric: str | None = None
    median_ms: float | None = None
    median_tok_s: float | None = None
    mem_end: float | None = None
    mem_peak: float | None = None
    error: str | None = None
    nonfinite: str | None = None  # "nan" / "inf" when the trainer stopped on such a loss
    diverged_step: int | None = None


def _add_line(stats, line, lowp):
    """Fold one stdout line into stats (lowp collects the FP8 / TCFP-12 options line)."""
    if m := STEP_RE.match(line):
        stats.last_step, stats.total_steps = int(m.group(1)), int(m.group(2))
        stats.step_ms.append(float(m.group(6)))
        stats.step_tok_s.append(float(m.group(7)))
        stats.skipped += "| skipped" in m.group(8)
    elif m := NUMERIC_RE.match(line):
        stats.numeric = m.group(1).strip()
    elif m := LOWP_RE.match(line):
        lowp.append(f"{m.group(1)} options: {m.group(2).strip()}")
    elif (m := CONFIG_ROW_RE.match(line)) and stats.numeric is None:
        stats.numeric = f"{m.group(1)}: {m.group(2)}"  # CPU trainer: no numeric config line (yet)
    elif m := MEDIAN_RE.match(line):
        stats.median_ms, stats.median_tok_s = float(m.group(1)), float(m.group(2))
    elif m := MEM_END_RE.match(line):
        stats.mem_end = float(m.group(1))
    elif m := ERROR_RE.match(line):
        stats.error = m.group(1).strip()
        if n := NONFINITE_RE.search(line):
            stats.nonfinite = n.group(1).lower().lstrip("-")
            d = DIVERGED_STEP_RE.search(line)
            stats.diverged_step = int(d.group(1)) if d else None
    if m := MEM_PEAK_RE.search(line):
        stats.mem_peak = float(m.group(1))


def parse_stdout(path):
    """LogStats of a trainer's stdout.log (empty stats when the file does not exist)."""
    stats, lowp = LogStats(), []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                _add_line(stats, line.rstrip("\n"), lowp)
    except FileNotFoundError:
        return stats
    if lowp:
        stats.numeric = "; ".join(([stats.numeric] if stats.numeric else []) + lowp)
    return stats


def median_step(stats):
    """(ms, tok/s) of the median step: the trainer's own when printed, else the upper median (as the
    GPU trainer takes it) of the step lines after the warm-up steps; None before the first step after
    them (a run that stopped early: its first steps include allocation and say nothing of its speed)."""
    if stats.median_ms is not None:
        return stats.median_ms, stats.median_tok_s
    if len(stats.step_ms) <= WARMUP_STEPS:
        return None, None
    ms, tok = sorted(stats.step_ms[WARMUP_STEPS:]), sorted(stats.step_tok_s[WARMUP_STEPS:])
    return ms[len(ms) // 2], tok[(len(tok) - 1) // 2]  # the tok/s of the median step: reverse order


def sibling(name):
    """A module of scripts/ (plot_loss, plot_stats), imported when first needed: both pull in
    matplotlib, which a sweep needs only for its report."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)


def read_losses(main_log):
    """(train, val, problem): [(step, loss)] from a main.log via plot_loss.py's parser; empty lists and
    the parser's message when it cannot read the file."""
    if not Path(main_log).exists():
        return [], [], None
    try:
        train, val = sibling("plot_loss").parse_log(main_log)
    except SystemExit as e:  # a torn last line of a killed run, or a foreign file: report, do not stop
        return [], [], str(e.code)
    return train, val, None


def last_step_line(path, tail_bytes=16384):
    """(step, total, ms) of the last step line in a growing log, or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if m := STEP_RE.match(line):
            return int(m.group(1)), int(m.group(2)), float(m.group(6))
    return None


def classify(exit_status, stats, train, val):
    """ok / diverged / failed from the exit status and the logs."""
    nonfinite = any(not math.isfinite(loss) for _, loss in train + val)
    if stats.nonfinite or nonfinite:
        return "diverged"
    return "ok" if exit_status == 0 else "failed"


# ------------------------------------------------------------------------------------------------
# Run folders and records


def read_record(run_dir):
    """The run.json of a finished run, None if absent or unreadable."""
    try:
        record = json.loads((Path(run_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "exit_status" in record else None


def write_record(run_dir, record):
    """run.json through a temporary file and a rename: a crash never leaves half a record."""
    tmp = Path(run_dir) / (RECORD + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(run_dir) / RECORD)


def check_run_dir(run_dir):
    """SweepError if run_dir holds files but is no run folder (no stdout.log / run.json): the sweep
    deletes the folder of a run it redoes, and must not delete what it did not write."""
    run_dir = Path(run_dir)
    if run_dir.is_dir() and any(run_dir.iterdir()) and not (run_dir / STDOUT).exists() and not (run_dir / RECORD).exists():
        raise SweepError(f"{run_dir}: exists and is not a run folder of a sweep (no {STDOUT}); move it away")
    if run_dir.exists() and not run_dir.is_dir():
        raise SweepError(f"{run_dir}: exists and is not a folder")


def clear_run_dir(run_dir):
    """Empty the folder of an interrupted (or --rerun) run."""
    check_run_dir(run_dir)
    if Path(run_dir).exists():
        shutil.rmtree(run_dir)


# ------------------------------------------------------------------------------------------------
# Processes


class Stop:
    """The signal that asked the sweep to stop (set by the handler, read by the loops)."""
    signum = None


def _on_signal(signum, frame):
    if Stop.signum is None:
        Stop.signum = signum


def install_signal_handlers():
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def _load_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: children of a killed sweep may outlive it
        return None


_PRCTL = _load_prctl()
PR_SET_PDEATHSIG = 1


def _child_setup():
    """In the child before exec: get SIGTERM when the sweep dies (even by SIGKILL), so that a killed
    sweep leaves no trainer running that a resumed sweep would start a second time."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(argv, log_path, env):
    """Start a child in its own session (Ctrl-C reaches the sweep only, which then stops it)."""
    with open(log_path, "wb") as log:
        try:
            return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True, preexec_fn=_child_setup)
        except OSError as e:  # not executable, wrong format: every run of that binary would fail alike
            raise SweepError(f"{argv[0]}: cannot start ({e.strerror or e})") from None


def terminate(procs):
    """SIGTERM to each child's process group, SIGKILL after a grace period."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + TERM_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def visible_gpus():
    """GPU ids to hand out: $CUDA_VISIBLE_DEVICES's entries when set, else nvidia-smi -L's indices."""
    if (cvd := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [x.strip() for x in cvd.split(",") if x.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [str(i) for i, _ in enumerate(l for l in out.stdout.splitlines() if l.startswith("GPU "))]


def run_slots(sweep, runs, warn):
    """One slot per GPU to use ([None]: one run at a time, no CUDA_VISIBLE_DEVICES set)."""
    if all(r.build == "cpu" for r in runs):
        return [None]
    if isinstance(sweep.gpus, list):
        return sweep.gpus
    ids = visible_gpus()
    if isinstance(sweep.gpus, int):
        ids = ids[:sweep.gpus]
    if not ids:
        warn("warning: no GPU found (nvidia-smi -L); runs go one at a time without CUDA_VISIBLE_DEVICES")
        return [None]
    return ids


# ------------------------------------------------------------------------------------------------
# Building


def build_variants(sweep, runs, build_dir, custom_build_dir, no_build, say):
    """Build each variant the runs need, once; SweepError with the log's tail on failure."""
    builds = list(dict.fromkeys(r.build for r in runs))
    for build in builds:
        binary = binary_path(build, build_dir)
        if no_build:
            if not binary.exists():
                raise SweepError(f"{display_path(binary)}: missing (--no-build); build it or drop --no-build")
            continue
        argv = make_command(build, build_dir, custom_build_dir)
        log_path = sweep.out / BUILD_LOGS / f"{build}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        say(f"build {build}: {command_line(argv)}  (log {display_path(log_path)})")
        t0 = time.monotonic()
        proc = spawn(argv, log_path, os.environ.copy())
        while proc.poll() is None and Stop.signum is None:
            time.sleep(POLL_S)
        if Stop.signum is not None:
            terminate([proc])
            return False
        if proc.returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
            raise SweepError(f"build {build} failed (make exit {proc.returncode}; {display_path(log_path)}):\n{tail}")
        if not binary.exists():
            raise SweepError(f"build {build}: make succeeded but {display_path(binary)} does not exist")
        say(f"build {build}: ok ({time.monotonic() - t0:.1f} s)")
    return True


# ------------------------------------------------------------------------------------------------
# Running


@dataclass
class Active:
    run: Run
    proc: subprocess.Popen
    slot: object
    argv: list
    env_added: dict
    log: Path
    started: float  # time.monotonic()
    started_wall: str
    total_steps: int | None


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def start_run(sweep, run, slot, build_dir):
    """Empty the run's folder and start its trainer on slot."""
    run_dir = sweep.out / run.label
    clear_run_dir(run_dir)
    run_dir.mkdir(parents=True)
    argv = run_command(sweep, run, build_dir)
    added = {}
    if slot is not None:
        added["CUDA_VISIBLE_DEVICES"] = slot
        if "CUDA_DEVICE_ORDER" not in os.environ:
            added["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the numbering of nvidia-smi -L
    added.update(dict(run.env))
    proc = spawn(argv, run_dir / STDOUT, {**os.environ, **added})
    return Active(run, proc, slot, argv, added, run_dir / STDOUT, time.monotonic(), now_iso(), max_steps(argv))


def finish_run(sweep, active):
    """Write the completion record of a trainer that exited by itself; returns it and the LogStats."""
    run_dir = sweep.out / active.run.label
    status = active.proc.returncode
    stats = parse_stdout(run_dir / STDOUT)
    train, val, _ = read_losses(run_dir / "main.log")
    record = {
        "label": active.run.label,
        "build": active.run.build,
        "outcome": classify(status, stats, train, val),
        "exit_status": status,
        "signal": -status if status < 0 else None,
        "wall_s": round(time.monotonic() - active.started, 3),
        "started": active.started_wall,
        "finished": now_iso(),
        "command": active.argv,
        "command_line": command_line(active.argv, active.env_added),
        "cwd": str(REPO),
        "env": active.env_added,
        "host": socket.gethostname(),
    }
    write_record(run_dir, record)
    return record, stats


def describe_end(record, stats):
    """One line on how a run ended."""
    outcome = record["outcome"]
    wall = f"{record['wall_s']:.1f} s"
    if outcome == "ok":
        return f"ok in {wall}"
    if outcome == "diverged":
        where = f" at step {stats.diverged_step}" if stats.diverged_step else ""
        return f"DIVERGED{where} ({stats.nonfinite or 'non-finite'} loss) after {wall}"
    why = f"signal {record['signal']}" if record["signal"] else f"exit {record['exit_status']}"
    return f"FAILED ({why}) after {wall}" + (f": error: {stats.error}" if stats.error else "")


class Progress:
    """Event lines plus a status line (redrawn in place on a terminal, every 30 s otherwise)."""

    def __init__(self, total, done, nslots):
        self.total, self.done, self.nslots = total, done, nslots
        self.tty = sys.stdout.isatty()
        self.last_status = 0.0
        self.drawn = False
        self.rates = {}  # build -> [seconds per step] of runs finished in this session

    def event(self, text):
        if self.drawn:
            sys.stdout.write("\r\033[K")
            self.drawn = False
        print(text, flush=True)

    def finished(self, active, record):
        self.done += 1
        tail = last_step_line(active.log)
        if tail and tail[0] > 0:
            self.rates.setdefault(active.run.build, []).append(record["wall_s"] / tail[0])

    def _eta(self, active_info, pending):
        """Seconds left: the active runs at their own pace (wall seconds per step so far, start-up and
        evaluation included), the pending ones at that of their build's runs, else of all runs."""
        left, unknown = 0.0, False
        rates = {build: list(r) for build, r in self.rates.items()}
        for a, step, total in active_info:
            if step and total:
                rate = (time.monotonic() - a.started) / step
                rates.setdefault(a.run.build, []).append(rate)
                left += (total - step) * rate
            else:
                unknown = True
        everything = [r for rs in rates.values() for r in rs]
        for run, steps in pending:
            rate_list = rates.get(run.build) or everything
            rate = statistics.mean(rate_list) if rate_list else None
            if rate and steps:
                left += rate * steps
            else:
                unknown = True
        return left / self.nslots, unknown

    def status(self, active, pending):
        now = time.monotonic()
        if not self.tty and now - self.last_status < STATUS_EVERY_S:
            return
        self.last_status = now
        parts, info = [f"{self.done}/{self.total} done"], []
        for a in active:
            tail = last_step_line(a.log)
            step, total, ms = tail if tail else (0, a.total_steps, None)
            info.append((a, step, total or a.total_steps))
            gpu = f" [GPU {a.slot}]" if a.slot is not None else ""
            parts.append(f"{a.run.label}{gpu} step {step}/{total or '?'}" + (f" {ms:.0f} ms" if ms else ""))
        eta, unknown = self._eta(info, pending)
        if unknown:  # some run's pace or length is not known yet: a lower bound, or nothing
            parts.append(f"ETA > {format_duration(eta)}" if eta else "ETA ?")
        else:
            parts.append(f"ETA {format_duration(eta)}")
        line = " | ".join(parts)
        if self.tty:
            width = shutil.get_terminal_size((120, 20)).columns
            sys.stdout.write("\r\033[K" + line[:width - 1])
            sys.stdout.flush()
            self.drawn = True
        else:
            print(line, flush=True)


def format_duration(seconds):
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def execute(sweep, todo, slots, build_dir, progress):
    """Run todo over the slots; returns False when a signal stopped the sweep."""
    pending = list(todo)
    active = {}  # slot -> Active
    try:
        return _execute_loop(sweep, pending, active, slots, build_dir, progress)
    finally:  # an exception (or a signal) must not leave trainers running unsupervised
        terminate([a.proc for a in active.values()])


def _execute_loop(sweep, pending, active, slots, build_dir, progress):
    while pending or active:
        if Stop.signum is not None:
            terminate([a.proc for a in active.values()])
            for a in active.values():
                progress.event(f"stopped {a.run.label} (no record: the next invocation redoes it)")
            active.clear()
            return False
        for slot in slots:
            if slot not in active and pending:
                run = pending.pop(0)
                a = start_run(sweep, run, slot, build_dir)
                active[slot] = a
                where = f" on GPU {slot}" if slot is not None else ""
                progress.event(f"start {run.label}{where}: {command_line(a.argv, a.env_added)}")
        for slot, a in list(active.items()):
            if a.proc.poll() is not None:
                del active[slot]
                record, stats = finish_run(sweep, a)
                progress.finished(a, record)
                progress.event(f"[{progress.done}/{progress.total}] {a.run.label}: {describe_end(record, stats)}")
        progress.status(list(active.values()), [(r, max_steps(run_command(sweep, r, build_dir))) for r in pending])
        time.sleep(POLL_S)
    return True


# ------------------------------------------------------------------------------------------------
# Report


@dataclass
class Result:
    """One row of the report."""
    label: str
    build: str
    status: str  # ok / diverged / failed / interrupted / pending
    exit_status: int | None = None
    final_val: float | None = None
    best_val: float | None = None
    delta_val: float | None = None
    median_ms: float | None = None
    tok_s: float | None = None
    tok_ratio: float | None = None
    mem_peak: float | None = None
    mem_end: float | None = None
    nonfinite: str | None = None
    diverged_step: int | None = None
    skipped: int = 0
    steps: int = 0
    numeric: str | None = None
    error: str | None = None
    wall_s: float | None = None
    command_line: str | None = None
    gpu: str | None = None
    heatmaps: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    train: list = field(default_factory=list)
    val: list = field(default_factory=list)


def collect(sweep, run, build_dir):
    """A Result from the run's folder (run.json, stdout.log, main.log) alone."""
    run_dir = sweep.out / run.label
    record = read_record(run_dir)
    stats = parse_stdout(run_dir / STDOUT)
    train, val, log_problem = read_losses(run_dir / "main.log")
    if record:
        status = classify(record["exit_status"], stats, train, val)
    else:
        status = "interrupted" if (run_dir / STDOUT).exists() else "pending"
    finite_val = [loss for _, loss in val if math.isfinite(loss)]
    final = [loss for step, loss in val if stats.total_steps and step == stats.total_steps]
    median_ms, tok_s = median_step(stats)
    env = (record or {}).get("env", {})
    result = Result(
        run.label, run.build, status, (record or {}).get("exit_status"),
        final_val=final[-1] if final and math.isfinite(final[-1]) else None,
        best_val=min(finite_val) if finite_val else None,
        median_ms=median_ms, tok_s=tok_s, mem_peak=stats.mem_peak, mem_end=stats.mem_end,
        nonfinite=stats.nonfinite or ("nan" if status == "diverged" else None), diverged_step=stats.diverged_step,
        skipped=stats.skipped, steps=stats.last_step, numeric=stats.numeric, error=stats.error,
        wall_s=(record or {}).get("wall_s"),
        command_line=(record or {}).get("command_line") or command_line(run_command(sweep, run, build_dir)),
        gpu=env.get("CUDA_VISIBLE_DEVICES"), train=train, val=val)
    if log_problem:
        result.notes.append(f"main.log not read: {log_problem}")
    if record and not same_command(record.get("command"), run_command(sweep, run, build_dir)):
        result.notes.append("ran with a command other than the sweep file's now (--rerun to redo it)")
    return result


def compare_to_baseline(results, baseline):
    """Fill in the differences to the baseline's final val loss and tok/s."""
    base = next(r for r in results if r.label == baseline)
    for r in results:
        if r.final_val is not None and base.final_val is not None:
            r.delta_val = r.final_val - base.final_val
        if r.tok_s and base.tok_s:
            r.tok_ratio = r.tok_s / base.tok_s


def make_heatmaps(run_dir):
    """Heatmaps of <run_dir>/tensor_stats.csv (remade only when the CSV is newer); [(title, path)]."""
    csv_path = run_dir / "tensor_stats.csv"
    if not csv_path.exists():
        return [], None
    plot_stats = sibling("plot_stats")
    out = run_dir / "heatmaps"
    wanted = [("amax", True), ("below_e4m3", True)]  # range and underflow: what a format must cover
    written, stamp = [], out / ".made"
    try:
        if not stamp.exists() or stamp.stat().st_mtime < csv_path.stat().st_mtime:
            for column, log in wanted:
                plot_stats.plot_stats(csv_path, [column], out, log=log, grid=True)
            stamp.touch()
    except plot_stats.StatsError as e:
        return [], str(e)
    for png in sorted(out.glob("*_grid.png")):
        column, kind = png.stem[:-len("_grid")].rsplit("_", 1)
        written.append((f"{column} {kind}", png))
    return written, None


def fmt(value, spec, none="–"):
    return none if value is None else format(value, spec)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def outcome_text(r):
    if r.status == "diverged":
        return f"**diverged** ({r.nonfinite or 'nan'}" + (f" at step {r.diverged_step})" if r.diverged_step else ")")
    if r.status == "failed":
        return "**failed**"
    return r.status


def table(results, baseline):
    header = ["run", "build", "outcome", "final val", "best val", "Δ val", "median step (ms)", "tok/s",
              "× baseline", "peak / end MiB", "skipped", "exit", "numeric config"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        name = f"[{r.label}]({r.label}/{STDOUT})" + (" (baseline)" if r.label == baseline else "")
        cells = [name, r.build, outcome_text(r), fmt(r.final_val, ".4f"), fmt(r.best_val, ".4f"),
                 fmt(r.delta_val, "+.4f"), fmt(r.median_ms, ".2f"), fmt(r.tok_s, ",.0f"), fmt(r.tok_ratio, ".3f"),
                 f"{fmt(r.mem_peak, '.0f')} / {fmt(r.mem_end, '.0f')}", str(r.skipped),
                 fmt(r.exit_status, "d"), f"`{r.numeric}`" if r.numeric else "–"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def problems(results):
    lines = []
    for r in results:
        if r.status in ("diverged", "failed"):
            lines.append(f"- **{r.label}**: {outcome_text(r).replace('**', '')} after {r.steps} step{'s' * (r.steps != 1)}"
                         + (f": `error: {r.error}`" if r.error else "") + f" ([log]({r.label}/{STDOUT}))")
        elif r.status == "interrupted":
            lines.append(f"- **{r.label}**: interrupted (no {RECORD}); the next invocation runs it again")
        elif r.status == "pending":
            lines.append(f"- **{r.label}**: not run yet")
        lines += [f"- **{r.label}**: {note}" for note in r.notes]
    return lines


def commands(results):
    lines = [f"Run from the repository root (`{REPO}`), output of each in `<out>/<label>`:", ""]
    for r in results:
        how = [f"GPU {r.gpu}" if r.gpu else None, f"{r.wall_s:.1f} s" if r.wall_s is not None else None,
               f"exit {r.exit_status}" if r.exit_status is not None else r.status]
        lines += [f"**{r.label}** ({', '.join(h for h in how if h)}):", "", "```", r.command_line, "```", ""]
    return lines


def render_report(sweep, results, heat_problems):
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Sweep `{sweep.name}`", "",
             f"Sweep file `{display_path(sweep.path.resolve())}`, baseline **{sweep.baseline}**; {len(results)} runs: "
             f"{summary}. Written {when} by `scripts/sweep.py` from the logs in this folder (regenerate: "
             f"`.venv/bin/python scripts/sweep.py {display_path(sweep.path.resolve())} --out {display_path(sweep.out)} "
             "--report-only` from the repository root).",
             "", *table(results, sweep.baseline), "",
             "Final val: the validation loss at the last step; Δ val: minus the baseline's. Median step: the "
             "trainer's `median step` line (GPU: after 3 warm-up steps), else the median of the step lines after "
             f"the first {WARMUP_STEPS}; × baseline: tok/s over the baseline's. Memory: `-lg`'s peak seen / "
             "`device memory in use at the end` (GPU trainer). Skipped: updates skipped (`-sl`/`-sg`, FP16 overflow).",
             "", "![train and validation loss](loss.png)", "", "![tokens per second](speed.png)", ""]
    if issues := problems(results) + heat_problems:
        lines += ["## Problems", "", *issues, ""]
    heat = [f"- **{r.label}**: " + ", ".join(f"[{t}]({p.relative_to(sweep.out)})" for t, p in r.heatmaps)
            for r in results if r.heatmaps]
    if heat:
        lines += ["## Tensor statistics (layer x step, `scripts/plot_stats.py`)", "", *heat, ""]
    lines += ["## Commands", "", *commands(results)]
    return "\n".join(lines)


def plot_val_delta(ax, results, baseline):
    """Val loss minus the baseline's at the steps both evaluated: differences of a few 0.01 nats, which
    decide between formats, are invisible on the full loss scale."""
    base = {s: loss for s, loss in next(r for r in results if r.label == baseline).val if math.isfinite(loss)}
    for i, r in enumerate(results):
        points = [(s, loss - base[s]) for s, loss in r.val if s in base and math.isfinite(loss)]
        if r.label != baseline and points:
            ax.plot(*zip(*points), marker="o", ms=3, color=f"C{i % 10}", label=r.label)
    ax.axhline(0.0, color="black", lw=1.0)
    ax.set_title(f"validation loss - {baseline}'s")
    ax.set_xlabel("step")
    ax.set_ylabel("difference (nats)")
    ax.grid(alpha=0.3)
    if len(ax.lines) > 1:
        ax.legend(fontsize=8)


def plot_losses(results, baseline, path):
    """Train and val loss curves, and val minus the baseline's; the y range of the first two is that of
    the finite losses, capped at the largest first loss so that a diverging run does not flatten the others."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_v, ax_d) = plt.subplots(1, 3, figsize=(18, 5))
    finite = [loss for r in results for _, loss in r.train + r.val if math.isfinite(loss)]
    firsts = [curve[0][1] for r in results for curve in (r.train, r.val) if curve and math.isfinite(curve[0][1])]
    for i, r in enumerate(results):
        style = {"color": f"C{i % 10}", "lw": 2.0 if r.label == baseline else 1.0}
        name = r.label + (" (baseline)" if r.label == baseline else "") + (f" ({r.status})" if r.status != "ok" else "")
        for ax, curve, marker in ((ax_t, r.train, None), (ax_v, r.val, "o")):
            points = [(s, loss) for s, loss in curve if math.isfinite(loss)]
            if points:
                ax.plot(*zip(*points), marker=marker, ms=3, label=name, alpha=0.85, **style)
                if r.status == "diverged":
                    ax.plot(*points[-1], marker="x", ms=10, mew=2, color=style["color"])
    for ax, title in ((ax_t, "train loss"), (ax_v, "validation loss")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy loss (nats)")
        ax.grid(alpha=0.3)
        if finite and firsts:
            lo, hi = min(finite), max(firsts)
            pad = 0.03 * (hi - lo) if hi > lo else 0.1
            ax.set_ylim(lo - pad, hi + pad)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no losses logged", transform=ax.transAxes, ha="center")
    plot_val_delta(ax_d, results, baseline)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speed(results, baseline, path):
    """Median tok/s per run as bars, each labelled with its ratio to the baseline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"ok": "C0", "diverged": "C3", "failed": "C7"}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(results) + 2), 4.5))
    labels = [r.label for r in results]
    values = [r.tok_s or 0.0 for r in results]
    bars = ax.bar(range(len(results)), values, color=[colors.get(r.status, "C7") for r in results],
                  edgecolor=["black" if r.label == baseline else "none" for r in results], linewidth=1.5)
    for bar, r in zip(bars, results):
        text = f"{r.tok_ratio:.3f}x" if r.tok_ratio else ("n/a" if not r.tok_s else "")
        if r.status != "ok":
            text += f"\n{r.status}"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(results)), labels, rotation=30, ha="right")
    ax.set_ylabel("tokens / s (median step)")
    ax.set_title(f"throughput, ratio to the baseline ({baseline})")
    ax.grid(axis="y", alpha=0.3)
    if values and max(values) > 0:
        ax.set_ylim(0, max(values) * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_json(sweep, results):
    skip = {"train", "val", "heatmaps", "command_line"}
    rows = [{k: v for k, v in vars(r).items() if k not in skip} for r in results]
    return {"name": sweep.name, "baseline": sweep.baseline, "runs": rows}


def write_report(sweep, build_dir):
    """report.md, loss.png, speed.png, summary.json from the out folder; returns the report's path."""
    sweep.out.mkdir(parents=True, exist_ok=True)
    results = [collect(sweep, run, build_dir) for run in sweep.runs]
    compare_to_baseline(results, sweep.baseline)
    heat_problems = []
    for r in results:
        r.heatmaps, problem = make_heatmaps(sweep.out / r.label)
        if problem:
            heat_problems.append(f"- **{r.label}**: tensor_stats.csv not plotted: {problem}")
    plot_losses(results, sweep.baseline, sweep.out / "loss.png")
    plot_speed(results, sweep.baseline, sweep.out / "speed.png")
    (sweep.out / "summary.json").write_text(json.dumps(summary_json(sweep, results), indent=2) + "\n")
    report = sweep.out / "report.md"
    tmp = report.with_suffix(".md.tmp")
    tmp.write_text(render_report(sweep, results, heat_problems) + "\n")
    os.replace(tmp, report)
    return report, results


# ------------------------------------------------------------------------------------------------
# Main


def require_matplotlib():
    """Stop before the builds and runs, not after them, when the report could not be drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SweepError(f"{sys.executable} has no matplotlib, which the report needs: run the sweep with "
                         ".venv/bin/python (make venv)")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", help="sweep file (TOML)")
    ap.add_argument("--out", help="output folder (instead of [sweep] out)")
    ap.add_argument("--dry-run", action="store_true", help="print the builds and runs it would do, do nothing")
    ap.add_argument("--rerun", action="append", default=[], metavar="LABEL", help="redo this run (repeatable)")
    ap.add_argument("--report-only", action="store_true", help="only regenerate the report from the out folder")
    ap.add_argument("--build-dir", help="the Makefile's BUILD folder [build]")
    ap.add_argument("--no-build", action="store_true", help="use the binaries in the build folder as they are")
    return ap.parse_args(argv)


def dry_run(sweep, done, todo, build_dir, custom_build_dir, slots):
    print(f"sweep {sweep.name}: {len(sweep.runs)} runs, out {display_path(sweep.out)}, slots "
          f"{', '.join('GPU ' + s if s is not None else 'one at a time' for s in slots)}")
    for build in dict.fromkeys(r.build for r in todo):
        print(f"build: {command_line(make_command(build, build_dir, custom_build_dir))}")
    for run in sweep.runs:
        state = "done, skipped" if run in done else "run"
        print(f"{run.label} ({state}): {command_line(run_command(sweep, run, build_dir))}")


def main(argv=None):
    args = parse_args(argv)
    try:
        sweep = load_sweep(args.sweep, args.out)
        build_dir = Path(args.build_dir).resolve() if args.build_dir else REPO / "build"
        for label in args.rerun:
            if label not in {r.label for r in sweep.runs}:
                raise SweepError(f"{args.sweep}: --rerun {label}: no run has this label")
        if not args.dry_run:
            require_matplotlib()
        if args.report_only:
            report, _ = write_report(sweep, build_dir)
            print(f"wrote {display_path(report)}")
            return 0
        return sweep_main(args, sweep, build_dir)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def sweep_main(args, sweep, build_dir):
    """Build, run what has no record, write the report."""
    if not args.dry_run:
        for label in args.rerun:
            clear_run_dir(sweep.out / label)
    done = [r for r in sweep.runs if read_record(sweep.out / r.label) and r.label not in args.rerun]
    todo = [r for r in sweep.runs if r not in done]
    slots = run_slots(sweep, todo, lambda text: print(text, file=sys.stderr))
    if args.dry_run:
        dry_run(sweep, done, todo, build_dir, bool(args.build_dir), slots)
        return 0
    for run in todo:  # before any build: a foreign folder in the way stops the sweep now, not midway
        check_run_dir(sweep.out / run.label)
    install_signal_handlers()
    progress = Progress(len(sweep.runs), len(done), len(slots))
    for run in done:
        record = read_record(sweep.out / run.label)
        changed = not same_command(record.get("command"), run_command(sweep, run, build_dir))
        progress.event(f"skip {run.label}: done before ({record.get('outcome', '?')}, {RECORD})"
                       + (f"; the sweep file now gives another command: --rerun {run.label} to redo it" if changed else ""))
    finished = build_variants(sweep, todo, build_dir, bool(args.build_dir), args.no_build, progress.event)
    if finished:
        finished = execute(sweep, todo, slots, build_dir, progress)
    if not finished:  # the trainers are stopped: a second Ctrl-C may now cut the report short
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    report, results = write_report(sweep, build_dir)
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in dict.fromkeys(r.status for r in results))
    progress.event(f"wrote {display_path(report)} ({counts})")
    if not finished:
        signum = Stop.signum or signal.SIGTERM
        progress.event(f"interrupted by {signal.Signals(signum).name}: run the same command again to resume")
        return 128 + signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
