"""The layering of llmc/, read from the sources (no build needed).

Every folder under llmc/ has a README.md whose `May include:` line lists the folders (or single files)
its files may include; every `#include "llmc/..."` line must name an existing file there, or the test
fails naming the file, the line and the include. On top of the per-folder lists, three rules of the
design hold transitively (through every chain of includes): kernels and numerics never reach a mode's
hooks (llmc/modes/<mode>/mode.cuh, test.cuh), the training run (llmc/train/) or the CLI
(llmc/core/cli.h). No `#if` on a mode macro outside llmc/modes/ and llmc/core/ (mode_rules.h selects the
mode, precision.h the storage type), in llmc/ and in the CUDA trainer, its test and the CPU trainer; none
on the storage-type macros either (code tests kStorageBF16 & co.) but in the files STORAGE_IF_ALLOWED
names. CUTLASS's headers are included only by the CUTLASS translation units llmc/kernels/gemm/*.cu. No
file under llmc/ is longer than 900 lines, and doc/ARCHITECTURE.md names every llmc/ folder and its
file:line pointers land on the functions they name. The rules cover every source under llmc/: the headers
(.h, .cuh) and the separately compiled translation units (.cu, .cpp: the cuDNN and CUTLASS backends).
"""
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LLMC = REPO / "llmc"
MAX_LINES = 900
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# preprocessor tests of the mode macros, and of the storage-type macros (code tests kStorageBF16 & co. instead)
MODE_IF = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b.*\b(ENABLE_(Q115|FP8|TCFP12|TCAST|CUDNN|CUTLASS)|SF16_TRUE_FORWARD|GEMM_LOWP\w*|"
                     r"\bTCAST\w*)\b")
STORAGE_IF = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b.*\bENABLE_(BF16|FP16|FP32)\b")
# Files that may test the storage type with the preprocessor, and why: --diagnose's helpers take BF16
# tensors (__nv_bfloat16 overloads, BF16 GEMM outputs) and do not compile for another floatX.
STORAGE_IF_ALLOWED = {"llmc/train/lowp_diagnose.cuh"}
ROOT_SOURCES = ["train_gpt2.cu", "test_gpt2.cu", "train_gpt2.c", "test_gpt2.c"]


def llmc_sources():
    return sorted(p for p in LLMC.rglob("*") if p.suffix in (".h", ".cuh", ".cu", ".cpp"))


def folder_of(path):
    """The folder a file belongs to for the rules: its folder relative to llmc/ ("kernels/gemm", "core")."""
    return path.parent.relative_to(LLMC).as_posix()


def readme_rules(folder):
    """(what, may_include list) from llmc/<folder>/README.md; a folder without one takes its parent's."""
    d = LLMC / folder
    while True:
        readme = d / "README.md"
        if readme.exists():
            text = readme.read_text()
            what = re.search(r"^What: (.+)$", text, re.M)
            may = re.search(r"^May include: (.+)$", text, re.M)
            assert what and may, f"{readme}: needs a `What:` and a `May include:` line"
            entries = [e.strip().strip("`") for e in re.split(r",", re.sub(r"\(.*?\)", "", may.group(1)))]
            return what.group(1), [e for e in entries if e]
        assert d != LLMC, f"llmc/{folder}: no README.md (with What: / May include:) in it or above it"
        d = d.parent


def includes(path):
    """[(line number, included path relative to the repository)] of the llmc includes of a file."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = INCLUDE.match(line)
        if m and m.group(1).startswith("llmc/"):
            out.append((i, m.group(1)))
    return out


def allowed(rule_entries, target):
    """Whether llmc-relative target (e.g. "core/utils.h") matches a May-include entry (folder or file)."""
    for e in rule_entries:
        e = e.rstrip("/")
        if target == e or target.startswith(e + "/"):
            return True
    return False


def test_every_folder_has_a_readme():
    folders = {folder_of(p) for p in llmc_sources()}
    for f in sorted(folders):
        readme_rules(f)  # asserts
    for d in sorted(p for p in LLMC.rglob("*") if p.is_dir()):
        assert (d / "README.md").exists() or d.parent != LLMC, f"{d.relative_to(REPO)}: top-level folder without a README.md"


def test_includes_follow_the_folder_rules():
    bad = []
    for path in llmc_sources():
        folder = folder_of(path)
        _, rules = readme_rules(folder)
        rules = rules + [folder]  # a folder may include its own files
        if path.name == "traits.cuh":  # compile time only: core, numerics and the identity hook
            rules = ["core", "numerics", "modes/boundary_identity.cuh"]
        for line, inc in includes(path):
            if not (REPO / inc).is_file():
                bad.append(f"{path.relative_to(REPO)}:{line}: includes {inc}, which does not exist")
            elif not allowed(rules, inc[len("llmc/"):]):
                bad.append(f"{path.relative_to(REPO)}:{line}: includes {inc}; llmc/{folder} may include {', '.join(rules)}")
    assert not bad, "\n".join(bad)


def closure(start):
    """Every llmc file reachable from `start` through literal includes."""
    seen, todo = set(), [start]
    while todo:
        p = todo.pop()
        for _, inc in includes(REPO / p):
            if inc not in seen and (REPO / inc).is_file():
                seen.add(inc)
                todo.append(inc)
    return seen


FORBIDDEN_BELOW_MODES = re.compile(r"^llmc/(train/|core/cli\.h$|modes/(?!boundary_identity\.cuh$)[^/]+/(mode|test)\.cuh$|modes/mode)")


def test_kernels_and_numerics_never_reach_modes_training_or_the_cli():
    bad = []
    for path in llmc_sources():
        rel = path.relative_to(REPO).as_posix()
        if not (rel.startswith("llmc/kernels/") or rel.startswith("llmc/numerics/")):
            continue
        for reached in sorted(closure(rel)):
            if FORBIDDEN_BELOW_MODES.match(reached):
                bad.append(f"{rel} reaches {reached}")
    assert not bad, "\n".join(bad)


def test_no_mode_if_outside_the_modes():
    bad = []
    files = [p for p in llmc_sources() if folder_of(p).split("/")[0] not in ("modes", "core")]
    files += [REPO / f for f in ROOT_SOURCES]
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if MODE_IF.match(line) or (STORAGE_IF.match(line) and rel not in STORAGE_IF_ALLOWED):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "mode (or storage-type) #if outside llmc/modes and llmc/core:\n" + "\n".join(bad)


CUTLASS_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"](cutlass|cute)/')


def test_cutlass_headers_only_in_their_translation_units():
    """CUTLASS's headers (<cutlass/...>, <cute/...>: about a minute and 4 GB of compiler memory per instantiation)
    are included only by the CUTLASS translation units llmc/kernels/gemm/*.cu, each compiled once into
    build/cutlass/, and by the templates they share (llmc/kernels/gemm/cutlass_*.cuh), which in turn only those
    translation units and each other include; their C++ APIs (the .h next to them), the rest of llmc/, the trainers
    and the dev/cuda harnesses never include either."""
    files = llmc_sources() + [REPO / f for f in ROOT_SOURCES] + sorted((REPO / "dev" / "cuda").glob("*.cu*"))
    bad = []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        in_gemm = rel.startswith("llmc/kernels/gemm/")
        allowed_here = in_gemm and (path.suffix == ".cu" or (path.suffix == ".cuh" and path.name.startswith("cutlass_")))
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if CUTLASS_INCLUDE.match(line) and not allowed_here:
                bad.append(f"{rel}:{i}: {line.strip()}")
            m = INCLUDE.match(line)
            if m and re.fullmatch(r"llmc/kernels/gemm/cutlass_\w*\.cuh", m.group(1)) and not allowed_here:
                bad.append(f"{rel}:{i}: {line.strip()} (a CUTLASS template outside the CUTLASS translation units)")
    assert not bad, "CUTLASS headers outside llmc/kernels/gemm/*.cu:\n" + "\n".join(bad)


def test_no_llmc_file_is_too_long():
    long = [f"{p.relative_to(REPO)}: {n} lines" for p in llmc_sources() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"llmc files over {MAX_LINES} lines:\n" + "\n".join(long)


def test_architecture_doc_names_every_folder():
    doc = (REPO / "doc" / "ARCHITECTURE.md").read_text()
    folders = sorted({p.relative_to(REPO).as_posix() for p in LLMC.rglob("*") if p.is_dir()})
    missing = [f for f in folders if f + "/" not in doc and f not in doc]
    assert not missing, f"doc/ARCHITECTURE.md does not name: {missing}"


def test_architecture_doc_pointers_land_on_their_functions():
    """Every `name` (file:line) pointer of doc/ARCHITECTURE.md: that line of that file names the function."""
    doc = (REPO / "doc" / "ARCHITECTURE.md").read_text()
    found = re.findall(r"`(\w+)`\s+\(([\w/.]+\.(?:cu|cuh|h)):(\d+)\)", doc)  # `name` (file:line)
    found += re.findall(r"\(`(\w+)`,\s+([\w/.]+\.(?:cu|cuh|h)):(\d+)[),]", doc)  # (`name`, file:line)
    assert len(found) >= 19, f"only {len(found)} pointers found"
    bad = []
    for name, path, line in found:
        lines = (REPO / path).read_text().splitlines()
        n = int(line)
        if n > len(lines) or name not in lines[n - 1]:
            bad.append(f"`{name}` ({path}:{line}): that line is {lines[n - 1].strip() if n <= len(lines) else 'past the end'!r}")
    assert not bad, "doc/ARCHITECTURE.md pointers that moved:\n" + "\n".join(bad)


@pytest.mark.parametrize("case", ["include", "mode_if"])
def test_the_checks_catch_a_violation(tmp_path, case, monkeypatch):
    """The checks themselves: a kernel including the CLI, a kernel with a mode #if (a fake llmc tree)."""
    fake = tmp_path / "llmc"
    (fake / "kernels").mkdir(parents=True)
    (fake / "core").mkdir()
    (fake / "kernels" / "README.md").write_text("What: kernels\nMay include: core, kernels\n")
    (fake / "core" / "README.md").write_text("What: core\nMay include: core\n")
    (fake / "core" / "cli.h").write_text("#pragma once\n")
    body = '#include "llmc/train/x.h"\n' if case == "include" else "#if defined(ENABLE_TCAST)\n#endif\n"
    (fake / "kernels" / "k.cuh").write_text(body)
    monkeypatch.setattr(sys.modules[__name__], "LLMC", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT_SOURCES", [])
    check = test_includes_follow_the_folder_rules if case == "include" else test_no_mode_if_outside_the_modes
    with pytest.raises(AssertionError, match="kernels/k.cuh"):
        check()
