"""Every flag of every trainer binary rejects malformed values, table-driven.

For the CPU trainer ($TRAIN_GPT2, else build/cpu/train_gpt2) and every CUDA trainer in
build/*/train_gpt2cu (CI compiles them before `make test`), the flags are read from `--help`; each
one gets non-numeric text, NaN and Inf (numeric flags) and the bad values of BAD below (out of range,
unknown choices, files that are missing or malformed), and must exit with status 1 and an `error:`
line naming the flag (or the offending file). A flag that `--help` lists and BAD does not is a
failure: a new flag must declare its range (llmc/core/cli.h) and get its row here.

Nothing trains: every value is rejected while parsing (before the data, the model or the GPU is
touched), so a CUDA binary runs here without a GPU. A stale CUDA binary (built before its flags got
their ranges) fails: rebuild it (scripts/build_variants.sh). A CUDA binary takes ~0.2 s to start (its CUDA libraries), so the cases run in
parallel, and a flag whose declaration (help line without the default) is the same as in the CPU
trainer or in the first CUDA binary, which test it with every value, gets "nan" and its first BAD
value only."""
import concurrent.futures
import glob
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_BIN = Path(os.environ.get("TRAIN_GPT2", REPO / "build" / "cpu" / "train_gpt2"))
CUDA_BINS = sorted(Path(p) for p in glob.glob(str(REPO / "build" / "*" / "train_gpt2cu")))

# int flags: "nan" / "inf" are non-numeric text to strtol like "abc". The CUDA binaries get the
# shorter lists (their start-up costs ~0.2 s of page faults in the CUDA libraries).
GENERIC = {"int": ["nan", "inf", "1.5", "99999999999", ""], "float": ["abc", "nan", "inf", "-inf", "1e999"]}
GENERIC_CUDA = {"int": ["nan", "1.5"], "float": ["abc", "nan", "inf"]}

# flag -> list of bad values; a value is "text", or (text, extra args, needle) where needle is what the
# error must name (default: the flag) and extra args are added before the flag (e.g. -h 1 for -hf).
# Paths in angle brackets are made by the `files` fixture.
BAD = {
    # shared (llmc/train/train_config.h)
    "-i": [("/nonexistent/shard_*.bin", [], None), ("<bad_shard>", [], "<bad_shard>")],
    "-j": [("/nonexistent/val_*.bin", [], None), ("<bad_shard>", [], "<bad_shard>")],
    "-o": ["<a_file>", "/nonexistent/dir/out"],
    "-e": ["q12", "d0", "d2,c65,h4", "d2,x5", "/nonexistent/model.bin", ("<bad_model.bin>", [], "<bad_model.bin>")],
    "-b": ["0", "-1", "1048577"],
    "-t": ["0", "-1", "1048577", "2048"],
    "-d": ["0", "-2", "100"],
    "-l": ["-1", "-1e-9"],
    "-u": ["-1"],
    "-q": ["-0.1", "1.5"],
    "-k": ["triangle", "Cosine", ""],
    "-c": ["-0.1"],
    "-gc": ["-1"],
    "-x": ["0", "-2"],
    "-v": ["-1"],
    "-m": ["0", "-1"],
    "-s": ["-1"],
    "-g": ["0", "-1", "1048577"],
    "-n": ["-2"],
    "-a": ["2", "-1"],
    "-tk": ["<a_dir>", ("<bad_tokenizer>", [], "<bad_tokenizer>")],
    "-seed": ["-1"],
    "-nk": ["-1", "2"],  # 2: without -o
    "-nm": ["-1"],
    "-sl": ["-1", "-0.5"],
    "-sg": ["-1", "-0.5"],
    "-h": ["2", "-1"],
    "-hf": [("/nonexistent/hellaswag_val.bin", ["-h", "1"], None), ("<bad_eval>", ["-h", "1"], "<bad_eval>")],
    # CPU trainer
    "-threads": ["-1", "4097"],
    # CUDA trainer (train_gpt2.cu)
    "-y": ["2", "-1", "1"],  # 1: without -o
    "-r": ["3", "-2"],
    "-w": ["2", "-1"],
    "-ge": ["2", "-1"],
    "-gt": ["2", "-1", "x"],
    "-f": ["2", "-1"],
    "-prof": ["2", "-1"],
    "--q115-stats": ["-1"],
    "--q115-cutlass": ["2", "-1"],
    "--diagnose": ["2", "-1"],
    "--tensor-stats": ["-1", "1"],  # 1: without -o
    "-lg": ["-2"],
    # multi-GPU (llmc/dist/multi_gpu.cuh)
    "-z": ["2", "-1"],
    "-gw": ["int8", "FP32"],
    "-pi": ["bogus", "MPI"],
    "-pn": ["0", "-2", "65537"],
    "-pr": ["-2", "65536", ("3", ["-pn", "2"], None)],
    "-pl": ["-2", "65536"],
    "-ps": ["nohost", "host:0", "host:65536", ":29500"],
    "-pf": ["/nonexistent/folder", "<a_file>"],
    "-pt": ["0", "-1", "86401"],
    "-pw": ["-1", "86401"],
    # FP8 / TCFP-12 (llmc/modes/lowp/gemm_lowp.cuh, lowp_cutlass.cuh)
    "--fp8-delayed": ["-1", "4097"],
    "--fp8-fast-accum": ["3", "-1"],
    "--fp8-hp-wgrad": ["2", "-1"],
    "--fp8-warmup": ["-1"],
    "--fp8-lm-head": ["2", "-1"],
    "--fp8-lm-head-rows": ["-1", "8", "100"],
    "--fp8-fallback": ["2", "-1"],
    "--fp8-producers": ["3", "-1"],
    "--fp8-cutlass": ["2", "-1", ("1", ["--fp8-producers", "0"], "--fp8-cutlass")],
    "--tcfp-block": ["16", "1", "-1", "256", ("128", ["--fp8-fast-accum", "1"], "--fp8-fast-accum")],
    "--tcfp-ef": ["2", "-1"],
    "--tcfp-srr": ["2", "-1"],
    "--tcfp-abd": ["2", "-1"],
    # TensorCast build (llmc/modes/tcast/tcast_config.h)
    "--cast": ["bogus", "nosuchsite=bfloat16"],
    "--cast-gemm": ["q=bfloat16", "x"],
    "--cast-lm-head": ["2", "-1"],
    "--cast-stats": ["-1"],
    "--cast-fuse": ["2", "-1"],
    "--cast-cutlass": ["2", "-1"],
}

HELP_LINE = re.compile(r"^\s+(-\S+)\s+(int|float|string)\s")


def parse_help(binary):
    """{flag: (type, declaration)} from the binary's --help (which must exit 0); the declaration is
    the help line without the [default]."""
    p = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{binary} --help failed ({p.returncode}):\n{p.stdout}{p.stderr}"
    flags = {}
    for line in p.stdout.splitlines():
        m = HELP_LINE.match(line)
        if m:
            flags[m.group(1)] = (m.group(2), re.sub(r" \[[^\]]*\]", "", line).strip())
    assert len(flags) >= 20, f"{binary} --help lists too few flags:\n{p.stdout}"
    return flags


def newest_source_mtime(*patterns):
    return max(os.path.getmtime(p) for pat in patterns for p in glob.glob(str(REPO / pat), recursive=True))


CUDA_SOURCES = ("train_gpt2.cu", "llmc/**/*.h", "llmc/**/*.cuh")


def reference_declarations(binary):
    """Declarations tested with every value elsewhere: the CPU trainer's and the first CUDA binary's."""
    refs = set()
    for other in ([CPU_BIN] if CPU_BIN.exists() else []) + CUDA_BINS[:1]:
        if other != binary:
            refs |= {decl for _, decl in parse_help(other).values()}
    return refs


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Valid and malformed input files; the substitutions for the <names> of BAD."""
    d = tmp_path_factory.mktemp("flags")
    header = [0] * 256
    shard = d / "good_shard.bin"
    header[:3] = [20240520, 1, 5000]
    shard.write_bytes(struct.pack("<256i", *header) + bytes(2 * 5000))
    bad_shard = d / "bad_shard.bin"
    header[:3] = [12345, 1, 5000]
    bad_shard.write_bytes(struct.pack("<256i", *header) + bytes(2 * 5000))
    bad_model = d / "bad_model.bin"
    bad_model.write_bytes(struct.pack("<256i", *([20240520] + [0] * 255)))
    bad_tok = d / "bad_tokenizer.bin"
    bad_tok.write_bytes(struct.pack("<256i", *([20240520, 2, 50257, 50256] + [0] * 252)))
    bad_eval = d / "bad_eval.bin"
    bad_eval.write_bytes(struct.pack("<256i", *([20240520, 1, 1, 10] + [0] * 252)) + bytes(10))
    a_file = d / "a_file.txt"
    a_file.write_text("x")
    a_dir = d / "a_dir"
    a_dir.mkdir()
    return {"<good_shard>": str(shard), "<bad_shard>": str(bad_shard), "<bad_model.bin>": str(bad_model),
            "<bad_tokenizer>": str(bad_tok), "<bad_eval>": str(bad_eval), "<a_file>": str(a_file), "<a_dir>": str(a_dir)}


def cases_for(flag, ftype, files, generic, reduced=False):
    """(args, needle) pairs for flag: the generic malformed values of its type, then BAD's (reduced:
    "nan" and the first of BAD)."""
    out = []
    for v in generic.get(ftype, [])[:1 if reduced else None]:
        out.append(([flag, "nan" if reduced else v], flag))
    for entry in BAD[flag][:1 if reduced else None]:
        value, extra, needle = (entry, [], None) if isinstance(entry, str) else entry
        value = files.get(value, value)
        needle = files.get(needle, needle) if needle else flag
        out.append(([*extra, flag, value], needle))
    return out


def run_case(binary, base, args):
    p = subprocess.run([str(binary), *base, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


_results = {}


def results_for(binary, files, refs=frozenset()):
    """Run every case of every flag of binary (in parallel, once); {flag: [(args, needle, code, output)]}.
    Flags whose declaration is in refs get the reduced cases."""
    if binary not in _results:
        flags = parse_help(binary)
        base = ["-i", files["<good_shard>"], "-j", files["<good_shard>"], "-tk", "/nonexistent/tokenizer.bin", "-x", "1"]
        jobs = [(flag, args, needle) for flag, (ftype, decl) in flags.items() if flag in BAD
                for args, needle in cases_for(flag, ftype, files, GENERIC if binary == CPU_BIN else GENERIC_CUDA, reduced=decl in refs)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
            outs = list(pool.map(lambda j: run_case(binary, base, j[1]), jobs))
        res = {flag: [] for flag in flags}
        for (flag, args, needle), (code, text) in zip(jobs, outs):
            res[flag].append((args, needle, code, text))
        _results[binary] = (flags, res)
    return _results[binary]


def check_binary(binary, files, refs=frozenset()):
    flags, res = results_for(binary, files, refs)
    missing = sorted(f for f in flags if f not in BAD)
    assert not missing, f"{binary}: flags without a row in dev/test/test_flags.py BAD: {missing}"
    failures = []
    for flag in flags:
        assert res[flag], f"{binary}: no case for {flag}"
        for args, needle, code, text in res[flag]:
            error_lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
            if code != 1 or not any(needle in ln for ln in error_lines):
                failures.append(f"{' '.join(map(repr, args))}: exit {code}, expected 1 and an error naming {needle!r}; got:\n{text[-600:]}")
    stale = binary.suffix != ".sh" and os.path.getmtime(binary) < newest_source_mtime(*CUDA_SOURCES, "train_gpt2.c")
    hint = " (the binary is older than the sources: rebuild it)" if stale else ""
    assert not failures, f"{binary}: {len(failures)} bad values not rejected as expected{hint}:\n" + "\n".join(failures[:20])
    return sum(len(v) for v in res.values())


@pytest.mark.skipif(not CPU_BIN.exists(), reason="needs build/cpu/train_gpt2")
def test_cpu_trainer_rejects_every_bad_flag_value(files):
    n = check_binary(CPU_BIN, files)
    assert n >= 150, n  # every flag got its cases


@pytest.mark.parametrize("binary", CUDA_BINS, ids=[p.parent.name for p in CUDA_BINS])
def test_cuda_trainer_rejects_every_bad_flag_value(binary, files):
    n = check_binary(binary, files, reference_declarations(binary))
    assert n >= len(parse_help(binary)) + 20, n  # every flag, most more than once


def test_the_table_catches_an_unknown_flag(files):
    """The check itself: a --help flag missing from BAD fails (run on a fake binary)."""
    fake = Path(files["<a_dir>"]) / "fake_trainer.sh"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --help ]; then\n"
                    + "".join(f"  echo '  {f}  int   x [0] {{0 .. 1}}'\n" for f in ["-b", "-t", "-x", "-v", "-m", "-s", "-g", "-n",
                                                                                   "-a", "-u", "-c", "-l", "-q", "-gc", "-d", "-nk",
                                                                                   "-nm", "-sl", "-sg", "-h", "--brand-new"])
                    + "  exit 0\nfi\necho \"error: $3: bad\" >&2; exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(AssertionError, match="--brand-new"):
        check_binary(fake, files)
