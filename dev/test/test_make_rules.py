"""The build's flag rules as make applies them (llmc/core/mode_rules.h through the C preprocessor, and the
attention backend choice in the Makefile): refused combinations stop make with the rule's message and a
non-zero status, and USE_CUDNN picks the attention backend and the build folder; CUTLASS is found where
CUTLASS_HOME points, and make info names it. Needs make and a C compiler only (no nvcc, no GPU): `make
print-VAR` evaluates the Makefile without building anything."""
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def make(*args):
    """(exit status, stdout + stderr) of `make -s --no-print-directory ARGS` in the repository."""
    p = subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def value(var, *flags):
    rc, out = make(f"print-{var}", *flags)
    assert rc == 0, out
    return out.strip()


@pytest.mark.parametrize("flags, message", [
    (["USE_CUDNN=1", "PRECISION=FP32"], "USE_CUDNN=1 cannot be combined with PRECISION=FP32"),
    (["USE_CUDNN=1", "ENABLE_Q115=1"], "ENABLE_CUDNN is not supported with ENABLE_Q115. Disable USE_CUDNN for SF16 builds."),
    (["USE_CUDNN=2"], "USE_CUDNN=2: expected 1 (cuDNN attention) or 0 (the built-in flash kernels)"),
    (["USE_CUDNN=yes"], "USE_CUDNN=yes: expected 1"),
    (["FP8=1", "TCFP12=1"], "FP8=1 and TCFP12=1 are two GEMM backends: choose one"),
])
def test_refused_combinations_stop_make_with_the_rule(flags, message):
    rc, out = make("print-VARIANT", *flags)
    assert rc != 0, out
    assert message in out, out


@pytest.mark.parametrize("flags, variant", [
    (["USE_CUDNN=0"], "bf16_flash"),
    (["USE_CUDNN=0", "FP8=1"], "fp8_flash"),
    (["USE_CUDNN=0", "PRECISION=FP16"], "fp16_flash"),
    (["USE_CUDNN=1"], "bf16"),
    (["USE_CUDNN=1", "TCFP12=1"], "tcfp12"),
    (["USE_CUDNN=1", "TCAST=1"], "tcast"),  # cuDNN serves the runs that cast no attention site
    (["USE_CUDNN=0", "TCAST=1"], "tcast_flash"),
])
def test_use_cudnn_names_the_build_folder(flags, variant):
    assert value("VARIANT", *flags) == variant
    on = "-DENABLE_CUDNN" in value("CUDA_MODE_FLAGS", *flags).split()
    assert on == ("USE_CUDNN=1" in flags)


@pytest.mark.parametrize("flags", [["ENABLE_Q115=1"], ["ENABLE_Q115=1", "SF16_TRUE_FORWARD=1"], ["PRECISION=FP32"]])
def test_the_default_never_picks_cudnn_where_the_mode_refuses_it(flags):
    # whatever this machine has: these modes act inside attention in every run or store fp32
    assert value("USE_CUDNN", *flags) == "0"
    assert "_flash" not in value("VARIANT", *flags)  # the default folder, not the opt-out one


@pytest.mark.parametrize("flags", [[], ["PRECISION=FP16"], ["FP8=1"], ["TCFP12=1"], ["TCAST=1"]])
def test_the_default_is_cudnn_exactly_where_it_is_found(flags):
    # TCAST=1 too: its runs take cuDNN's attention unless --cast names an attention site
    found = value("HAVE_CUDA") == "1" and value("HAVE_CUDNN") == "1"
    assert value("USE_CUDNN", *flags) == ("1" if found else "0")
    assert "_flash" not in value("VARIANT", *flags)


def test_make_info_names_the_attention_backend_and_cudnn():
    rc, out = make("info")
    assert rc == 0, out
    def line(prefix):
        found = [l for l in out.splitlines() if l.startswith("  " + prefix)]
        assert found, f"no `{prefix}` line in make info:\n{out}"
        return found[0]
    assert ("cuDNN fused SDPA" in line("attention")) == (value("USE_CUDNN") == "1")
    lib, front = line("cuDNN  "), line("cuDNN front")
    if value("HAVE_CUDNN") == "1":  # the version and the origin of each
        assert "(9." in lib or "(8." in lib, lib
        assert "(1." in front, front


def fake_cutlass(root, version=(9, 8, 7)):
    """A CUTLASS_HOME holding only include/cutlass/version.h of `version`."""
    inc = root / "include" / "cutlass"
    inc.mkdir(parents=True)
    (inc / "version.h").write_text("#pragma once\n#define CUTLASS_MAJOR %d\n#define CUTLASS_MINOR %d\n#define CUTLASS_PATCH %d \n"
                                   "#define CUTLASS_VERSION ((CUTLASS_MAJOR)*100 + (CUTLASS_MINOR)*10 + CUTLASS_PATCH)\n" % version)
    return root


def test_cutlass_home_is_searched_first_and_named(tmp_path):
    home = fake_cutlass(tmp_path / "cutlass")
    assert value("CUTLASS_INC", f"CUTLASS_HOME={home}") == str(home / "include")
    rc, out = make("info", f"CUTLASS_HOME={home}")
    assert rc == 0, out
    line = [l for l in out.splitlines() if l.startswith("  CUTLASS")]
    assert line and line[0] == f"  CUTLASS      {home / 'include'} (9.8.7, CUTLASS_HOME)", out


def test_make_info_names_cutlass():
    rc, out = make("info")
    assert rc == 0, out
    line = [l for l in out.splitlines() if l.startswith("  CUTLASS")]
    assert line, f"no CUTLASS line in make info:\n{out}"
    if value("CUTLASS_INC"):  # found: its version and where it came from
        assert re.search(r"\(\d+\.\d+\.\d+, (venv \(PyPI\)|CUTLASS_HOME|system)\)$", line[0]), line[0]
    else:
        assert "not found" in line[0], line[0]


def test_cutlass_harness_only_in_the_default_list_where_cutlass_is_found(tmp_path):
    home = fake_cutlass(tmp_path / "cutlass")
    assert "cutlass_fp8" in value("HARNESSES", f"CUTLASS_HOME={home}").split()
    if not value("CUTLASS_INC"):
        assert "cutlass_fp8" not in value("HARNESSES").split()
