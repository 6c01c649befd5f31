"""Tests of dev/data/hellaswag.py (HellaSwag jsonl into llm.c's eval file for -h 1 -hf), offline.

The eval file is read back by a parser written here from the format (doc/FORMATS.md, hellaswag.h),
and the tokens are compared with tiktoken's encode(ctx) / encode(" " + ending), llm.c's rendering.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "dev" / "data"
sys.path.insert(0, str(DATA_DIR))
import data_common  # noqa: E402
import hellaswag  # noqa: E402
from offline import block_network, offline_argv  # noqa: E402

SHARED = data_common.shared_data_dir()
pytestmark = pytest.mark.skipif(SHARED is None,
                                reason="shared data folder not found (GPT-2 BPE files for offline tiktoken)")
SCRIPT = DATA_DIR / "hellaswag.py"

def run_cli(*args):
    """Run hellaswag.py offline; the CompletedProcess."""
    return subprocess.run(offline_argv(SCRIPT, *args),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No network in this process either (the in-process runs)."""
    block_network(monkeypatch)


@pytest.fixture(scope="module")
def enc():
    """The GPT-2 encoding through data_common (the shared BPE files)."""
    return data_common.get_gpt2_encoding()


def parse_evalfile(path):
    """Read an eval file by the format alone, checking every structural field: [(label, context
    tokens, [4 ending tokens])]."""
    raw = Path(path).read_bytes()
    assert len(raw) >= 1024 and len(raw) % 2 == 0
    header = np.frombuffer(raw[:1024], dtype="<i4")
    words = np.frombuffer(raw[1024:], dtype="<u2")
    examples, pos, longest = [], 0, 0
    for i in range(int(header[2])):
        assert words[pos] == 65535, f"example {i}: start delimiter"
        nbytes = int(words[pos + 1])
        assert int(words[pos + 2]) == i, f"example {i}: index"
        label, completions = int(words[pos + 3]), int(words[pos + 4])
        assert completions == 4 and 0 <= label < 4
        p = pos + 5
        n = int(words[p])
        context = words[p + 1:p + 1 + n].tolist()
        p += 1 + n
        endings = []
        for _ in range(completions):
            m = int(words[p])
            endings.append(words[p + 1:p + 1 + m].tolist())
            p += 1 + m
        assert 2 * (p - pos) == nbytes, f"example {i}: example_bytes"
        longest = max(longest, nbytes)
        examples.append((label, context, endings))
        pos = p
    assert pos == len(words), "words after the last example"
    assert list(header[:4]) == [20240522, 1, len(examples), longest] and not header[4:].any()
    return examples


ROWS = [
    {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3,
     "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                 "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
     "source_id": "activitynet~v_-JhWjGDPHMY"},
    {"ctx": "[header] How to make café au lait [title] Heat the milk.", "label": 0,
     "endings": ["Pour it over the coffee.", "", "Über alles — 日本語 😀", "  Two leading spaces."]},
    {"ctx": "The quiz show", "label": "2", "endings": ["a", "b", "c", "d"]},  # a string label, as in some copies
    {"ctx": "Line one\nline two\twith a tab", "label": 1, "endings": ["x\ny", "z", "w", "v"]},
]


def write_rows(path, rows, blank_lines=True):
    """A jsonl file of rows (dicts, or raw strings written as they are), with a blank line between the
    first two when blank_lines."""
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    if blank_lines and len(lines) > 1:
        lines.insert(1, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_examples_read_back_with_llmc_rendering(tmp_path, enc):
    """Every example: index, label, encode(ctx), encode(" " + ending) for each ending, header fields,
    lengths; the file ends after the last example."""
    src = write_rows(tmp_path / "val.jsonl", ROWS)
    out = tmp_path / "sub" / "hs.bin"
    proc = run_cli("--input", src, "--out", out)
    assert proc.returncode == 0, proc.stderr
    got = parse_evalfile(out)
    want = [(int(r["label"]), enc.encode(r["ctx"]), [enc.encode(" " + e) for e in r["endings"]]) for r in ROWS]
    assert got == want
    assert got[1][2][1] == enc.encode(" ")  # an empty ending is its space
    assert f"input {src}: 4 examples (labels 0-3: 1, 1, 1, 1)" in proc.stdout
    longest = max(len(c) + max(map(len, e)) for _, c, e in want)
    assert f"longest context + ending {longest} tokens" in proc.stdout
    assert not list(out.parent.glob("*.tmp"))


def test_the_default_output_is_where_the_trainers_look(tmp_path):
    """--out's default is the -hf default of the trainers (TRAIN_CONFIG_HELLASWAG_DEFAULT, relative
    to the repository root where they run), whichever folder train_config.h is in now."""
    headers = [p for p in (REPO / "llmc").rglob("train_config.h")]
    assert headers, "train_config.h not found under llmc/"
    m = re.search(r'#define\s+TRAIN_CONFIG_HELLASWAG_DEFAULT\s+"([^"]+)"', headers[0].read_text())
    assert m, f"{headers[0]}: no TRAIN_CONFIG_HELLASWAG_DEFAULT"
    assert hellaswag.DEFAULT_OUT == REPO / m.group(1)
    assert hellaswag.parse_args([]).out == REPO / m.group(1)


GOOD = ROWS[2]


def with_(**changes):
    """GOOD with keys changed (a value None removes the key)."""
    row = dict(GOOD)
    for key, value in changes.items():
        if value is None:
            row.pop(key)
        else:
            row[key] = value
    return row


@pytest.mark.parametrize("row,message", [
    ('{"ctx": "x", "label": 0, "endings": ["a", "b", "c", "d"]', "not valid JSON (Expecting ',' delimiter)"),
    ("[1, 2, 3]", "expected a JSON object, got list"),
    (with_(ctx=None), "missing key 'ctx' (keys: label, endings)"),
    (with_(endings=None), "missing key 'endings' (keys: ctx, label)"),
    (with_(label=None), "missing key 'label' (keys: ctx, endings)"),
    (with_(label=4), "label: 4 is not one of 0, 1, 2, 3"),
    (with_(label=-1), "label: -1 is not one of 0, 1, 2, 3"),
    (with_(label="x"), 'label: "x" is not one of 0, 1, 2, 3'),
    (with_(label=True), "label: true is not one of 0, 1, 2, 3"),
    (with_(label=1.0), "label: 1.0 is not one of 0, 1, 2, 3"),
    (with_(endings=["a", "b", "c"]), "endings: expected a list of 4 strings, got 3 endings"),
    (with_(endings=["a", "b", "c", "d", "e"]), "endings: expected a list of 4 strings, got 5 endings"),
    (with_(endings="abcd"), "endings: expected a list of 4 strings, got str"),
    (with_(endings=["a", "b", 3, "d"]), "endings[2]: expected a string, got int"),
    (with_(ctx=""), 'ctx: expected a non-empty string, got ""'),
    (with_(ctx=["a"]), 'ctx: expected a non-empty string, got ["a"]'),
], ids=["bad-json", "not-object", "no-ctx", "no-endings", "no-label", "label-4", "label-negative", "label-text",
        "label-bool", "label-float", "3-endings", "5-endings", "endings-string", "ending-int", "empty-ctx",
        "ctx-list"])
def test_a_malformed_row_stops_naming_file_and_line(tmp_path, capsys, row, message):
    """The bad row is line 4 (after two good rows and a blank line): `error: FILE:4: ...`, exit 1,
    no output file."""
    src = write_rows(tmp_path / "bad.jsonl", [ROWS[0], ROWS[1], row, ROWS[3]])
    out = tmp_path / "hs.bin"
    assert hellaswag.main(["--input", str(src), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {src}:4: {message}\n"
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_not_utf8_and_missing_input(tmp_path, capsys):
    """A row that is not UTF-8 names its line; a missing --input names the file."""
    src = tmp_path / "latin1.jsonl"
    src.write_bytes(b'{"ctx": "caf\xe9", "label": 0, "endings": ["a", "b", "c", "d"]}\n')
    assert hellaswag.main(["--input", str(src), "--out", str(tmp_path / "o.bin")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {src}:1: not UTF-8")
    assert hellaswag.main(["--input", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o.bin")]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.jsonl'}: no such file\n"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert hellaswag.main(["--input", str(empty), "--out", str(tmp_path / "o.bin")]) == 1
    assert capsys.readouterr().err == f"error: {empty}: no examples\n"


def test_an_example_too_long_for_the_format(tmp_path, capsys):
    """An example over the 16-bit example_bytes field is an error naming its line."""
    src = write_rows(tmp_path / "long.jsonl", [GOOD, with_(ctx="a" + " a" * 33000)], blank_lines=False)
    assert hellaswag.main(["--input", str(src), "--out", str(tmp_path / "o.bin")]) == 1
    err = capsys.readouterr().err
    assert re.match(rf"error: {re.escape(str(src))}:2: the example takes \d+ bytes, more than the format's 16-bit "
                    r"length field holds \(65534\)\n$", err), err
    assert not (tmp_path / "o.bin").exists()


def test_offline_without_input_names_the_url_and_input(tmp_path):
    """No --input, nothing downloaded yet and no network: one error naming the URL and --input."""
    proc = run_cli("--download-dir", tmp_path / "dl", "--out", tmp_path / "hs.bin")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {hellaswag.URL}: download failed (")
    assert "give --input" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "hs.bin").exists() and not (tmp_path / "dl" / "hellaswag_val.jsonl").exists()


def test_a_downloaded_copy_is_used_offline(tmp_path, enc):
    """A hellaswag_val.jsonl already in --download-dir is read without the network."""
    (tmp_path / "dl").mkdir()
    write_rows(tmp_path / "dl" / "hellaswag_val.jsonl", ROWS)
    proc = run_cli("--download-dir", tmp_path / "dl", "--out", tmp_path / "hs.bin")
    assert proc.returncode == 0, proc.stderr
    assert "downloading" not in proc.stdout
    assert [e[0] for e in parse_evalfile(tmp_path / "hs.bin")] == [3, 0, 2, 1]


def test_help_documents_the_options_and_format():
    """--help lists every option and explains input, rendering, output and errors."""
    proc = run_cli("--help")
    assert proc.returncode == 0
    for needle in ("--input", "--out", "--download-dir", "20240522", "65535", 'encode(" " + ending)',
                   "rowanz/hellaswag", "dev/data/hellaswag/hellaswag_val.bin", "FILE:LINE", "label", "endings"):
        assert needle in proc.stdout, needle


def test_write_evalfile_matches_the_parser(tmp_path):
    """write_evalfile directly, with the largest token id and one-token fields."""
    rendered = [("a:1", 0, [50256], [[1], [2, 3], [50256], [4]]), ("a:2", 3, [5, 6, 7], [[8], [9], [10], [11, 12]])]
    # words: 5 fixed + context length and tokens + each ending's length and tokens: 16 and 18
    assert hellaswag.write_evalfile(tmp_path / "e.bin", rendered) == (2, 36)
    assert parse_evalfile(tmp_path / "e.bin") == [(r[1], r[2], r[3]) for r in rendered]
    assert os.path.getsize(tmp_path / "e.bin") == 1024 + 2 * (16 + 18)
