"""Tests of dev/data/fineweb.py (FineWeb / FineWeb-Edu into llm.c token shards), offline.

Inputs are small parquet and jsonl files in FineWeb's schema that the tests write. The command line
runs as a subprocess with every network connection refused; the error paths that need a fault (a
full disk, a download cut off) run fineweb.main in this process with the fault patched in, and the
network refused here too. Also checks the GPT-2 (124M) FineWeb sweep file of doc/REPRODUCE_GPT2.md.
"""
import errno
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "dev" / "data"
sys.path.insert(0, str(DATA_DIR))
import data_common  # noqa: E402
import fineweb  # noqa: E402
import tinyshakespeare  # noqa: E402
from offline import block_network, offline_argv  # noqa: E402

OLD_VENV = "not in this venv (made before fineweb.py needed it): rm .venv/.complete && make venv"
pa = pytest.importorskip("pyarrow", reason=f"pyarrow {OLD_VENV}")
pq = pytest.importorskip("pyarrow.parquet", reason=f"pyarrow {OLD_VENV}")
pytest.importorskip("tqdm", reason=f"tqdm {OLD_VENV}")

SHARED = data_common.shared_data_dir()
pytestmark = pytest.mark.skipif(SHARED is None,
                                reason="shared data folder not found (GPT-2 BPE files for offline tiktoken)")
SCRIPT = DATA_DIR / "fineweb.py"
EOT = 50256

def cli(*args):
    """argv running fineweb.py offline."""
    return offline_argv(SCRIPT, *args)


def run_cli(*args, env=None, timeout=120):
    """Run fineweb.py offline; the CompletedProcess."""
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


class Result:
    """What an in-process run of fineweb.main gave: returncode, stdout, stderr."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run_main(capsys):
    """Run fineweb.main in this process (faster than a subprocess; the network is refused here too)."""
    def run(*args):
        capsys.readouterr()
        code = fineweb.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return run


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No network in this process either (the in-process runs)."""
    block_network(monkeypatch)


@pytest.fixture(scope="module")
def enc():
    """The GPT-2 encoding through data_common (the shared BPE files)."""
    return data_common.get_gpt2_encoding()


WORDS = ("the of and to in a is that for it as was with be by on not he I this are or his from at which "
         "naïve café über straße 日本語 テスト 😀 ’quoted’ 42 3.14 -- ... \t\n\n").split(" ")


def make_docs(n, seed, max_words=60):
    """n documents of random words (non-ASCII, tabs, blank lines included); document 3 is empty and
    document 5 holds the text "<|endoftext|>", which is ordinary text, not the token."""
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, rng.integers(1, max_words))) for _ in range(n)]
    if n > 5:
        docs[3], docs[5] = "", "before <|endoftext|> after"
    return docs


def write_parquet(path, docs, first_id=0, row_group_size=7):
    """A parquet file in FineWeb's schema (text, id, dump, url, date, file_path, language,
    language_score, token_count) with small row groups."""
    n = len(docs)
    table = pa.table({
        "text": pa.array(docs, pa.string()),
        "id": [f"<urn:uuid:{first_id + i:08d}>" for i in range(n)],
        "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://example.org/{first_id + i}" for i in range(n)],
        "date": ["2024-02-21T00:00:00Z"] * n,
        "file_path": ["s3://commoncrawl/crawl-data/x.warc.gz"] * n,
        "language": ["en"] * n,
        "language_score": pa.array([0.9] * n, pa.float64()),
        "token_count": pa.array([len(d) for d in docs], pa.int64()),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_jsonl(path, docs, first_id=0):
    """A JSON-lines file in FineWeb's schema (gzip when the name ends in .gz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"text": d, "id": f"<urn:uuid:{first_id + i:08d}>", "dump": "CC-MAIN-2024-10",
                                "url": f"https://example.org/{first_id + i}"}) + "\n" for i, d in enumerate(docs))
    data = lines.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def read_shard(path):
    """The tokens of a shard, after checking the header words and the length."""
    raw = Path(path).read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert list(header[:3]) == [20240520, 1, (len(raw) - 1024) // 2], path
    assert not header[3:].any() and header[2] > 0 and len(raw) == 1024 + 2 * header[2], path
    return np.frombuffer(raw[1024:], dtype="<u2")


def shard_names(prefix, n):
    """llm.c's names of n shards."""
    return [f"{prefix}_val_000000.bin"] + [f"{prefix}_train_{i:06d}.bin" for i in range(1, n)]


def shards_of(out, prefix="fineweb"):
    """{name: bytes} of the shards in a folder."""
    return {p.name: p.read_bytes() for p in sorted(out.glob(f"{prefix}_*.bin"))}


def doc_tokens(enc, docs):
    """Each document as the shards hold it: <|endoftext|> then encode_ordinary."""
    return [[EOT] + enc.encode_ordinary(d) for d in docs]


def progress_of(out, prefix="fineweb"):
    """The progress file's contents."""
    return json.loads((out / f"{prefix}_progress.json").read_text())


def test_parquet_and_jsonl_inputs_give_llmc_shards(tmp_path, enc):
    """Two parquet files (a glob), a jsonl and a jsonl.gz file: names, header fields, full shards but
    the last, every document's tokens in order across the boundaries, the recorded positions."""
    docs = make_docs(400, seed=1)
    parts = [docs[:150], docs[150:250], docs[250:330], docs[330:]]
    write_parquet(tmp_path / "in" / "b_000.parquet", parts[0])
    write_parquet(tmp_path / "in" / "b_001.parquet", parts[1], first_id=150)
    write_jsonl(tmp_path / "in" / "c.jsonl", parts[2], first_id=250)
    write_jsonl(tmp_path / "in" / "d.jsonl.gz", parts[3], first_id=330)
    out = tmp_path / "out"
    proc = run_cli("--input", f"{tmp_path}/in/b_*.parquet", tmp_path / "in" / "c.jsonl", tmp_path / "in" / "d.jsonl.gz",
                   "-o", out, "-s", 1000, "-w", 2, "--tokenizer-out", tmp_path / "tok.bin")
    assert proc.returncode == 0, proc.stderr
    expected = doc_tokens(enc, docs)
    stream = np.concatenate(expected)
    n_shards = -(-len(stream) // 1000)
    assert set(shards_of(out)) == set(shard_names("fineweb", n_shards))
    shards = [read_shard(out / name) for name in shard_names("fineweb", n_shards)]
    assert [len(s) for s in shards] == [1000] * (n_shards - 1) + [len(stream) - 1000 * (n_shards - 1)]
    assert np.array_equal(np.concatenate(shards), stream)
    assert np.count_nonzero(stream == EOT) == len(docs)  # the literal "<|endoftext|>" text is not EOT
    assert expected[3] == [EOT]
    progress = progress_of(out)
    assert progress["complete"] and progress["totals"] == {"documents": 400, "tokens": len(stream)}
    ends = np.cumsum([len(t) for t in expected])
    file_of = [0] * 150 + [1] * 100 + [2] * 80 + [3] * 70
    row_of = list(range(150)) + list(range(100)) + list(range(80)) + list(range(70))
    for i, shard in enumerate(progress["shards"][:-1]):  # where the next shard starts
        boundary = 1000 * (i + 1)
        doc = int(np.searchsorted(ends, boundary))  # the document holding token `boundary - 1`
        assert shard["next"] == {"doc": doc, "file": file_of[doc], "row": row_of[doc],
                                 "skip_tokens": boundary - (int(ends[doc - 1]) if doc else 0)}
    assert progress["shards"][-1]["next"] is None
    assert (tmp_path / "tok.bin").stat().st_size > 1024
    assert f"done: 400 documents, {len(stream):,} tokens in {n_shards} shards" in proc.stdout


def test_the_same_text_gives_the_tokens_of_tinyshakespeare_py(tmp_path, run_main, capsys):
    """Tiny Shakespeare's sections as documents: with 32,768-token shards the validation shard is
    byte for byte tinyshakespeare.py's, and the train shards hold its train tokens."""
    text = (SHARED / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    sections = text.split("\n\n")
    docs = [s + "\n\n" for s in sections[:-1]] + [sections[-1]]  # how tinyshakespeare.tokenize cuts it
    write_parquet(tmp_path / "ts.parquet", docs, row_group_size=5000)
    ts = tmp_path / "ts"
    assert tinyshakespeare.main(["--input", str(SHARED / "tinyshakespeare" / "input.txt"), "--out-dir", str(ts),
                                 "--tokenizer-out", str(ts / "tok.bin")]) == 0, capsys.readouterr().err
    out = tmp_path / "fw"
    proc = run_main("--input", tmp_path / "ts.parquet", "-o", out, "-s", 32768, "-w", 2,
                    "--tokenizer-out", out / "tok.bin")
    assert proc.returncode == 0, proc.stderr
    assert (out / "fineweb_val_000000.bin").read_bytes() == (ts / "tiny_shakespeare_val.bin").read_bytes()
    train = np.concatenate([read_shard(p) for p in sorted(out.glob("fineweb_train_*.bin"))])
    assert np.array_equal(train, read_shard(ts / "tiny_shakespeare_train.bin"))
    assert len(train) == 305260
    assert (out / "tok.bin").read_bytes() == (ts / "tok.bin").read_bytes()
    enc = data_common.get_gpt2_encoding()
    assert tinyshakespeare.tokenize(text, enc) == [t for d in doc_tokens(enc, docs) for t in d]


def test_edu_names_and_a_single_shard(tmp_path, run_main):
    """--type edu names the shards edufineweb_*; input that fits one shard gives the validation shard
    only, with a warning."""
    write_jsonl(tmp_path / "e.jsonl", make_docs(20, seed=2))
    proc = run_main("--type", "edu", "--input", tmp_path / "e.jsonl", "-o", tmp_path / "out", "-w", 1,
                   "--tokenizer-out", tmp_path / "tok.bin")
    assert proc.returncode == 0, proc.stderr
    assert list(shards_of(tmp_path / "out", "edufineweb")) == ["edufineweb_val_000000.bin"]
    assert (tmp_path / "out" / "edufineweb_progress.json").is_file()
    assert "warning: everything went into the validation shard" in proc.stderr


def processes_in_group(pgid):
    """Pids of the live (not zombie) processes of a process group (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path, run_main):
    """Killed with SIGKILL after some shards (the input comes through a pipe, so the kill lands mid-run
    for certain), then run again on the whole file: the shards are those of an uninterrupted run,
    byte for byte; the tokenizer workers do not outlive the killed process."""
    docs = make_docs(1200, seed=3)
    full = write_jsonl(tmp_path / "full.jsonl", docs)
    ref = tmp_path / "ref"
    proc = run_main("--input", full, "-o", ref, "-s", 1500, "-w", 1, "--tokenizer-out", tmp_path / "tok.bin")
    assert proc.returncode == 0, proc.stderr

    src = tmp_path / "in" / "docs.jsonl"
    src.parent.mkdir()
    os.mkfifo(src)
    lines = full.read_bytes().splitlines(keepends=True)
    release = threading.Event()

    def feed():
        """Write 900 documents, then wait for the kill."""
        try:
            with open(src, "wb") as f:
                f.write(b"".join(lines[:900]))
                f.flush()
                release.wait(120)
                f.write(b"".join(lines[900:]))
        except OSError:  # the reader is gone
            pass
    threading.Thread(target=feed, daemon=True).start()
    out = tmp_path / "out"
    args = ("--input", src, "-o", out, "-s", 1500, "-w", 2, "--tokenizer-out", tmp_path / "tok.bin")
    proc = subprocess.Popen(cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not ((out / "fineweb_progress.json").is_file() and len(progress_of(out)["shards"]) >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "no second shard within 60 s"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        release.set()
        deadline = time.time() + 10
        while processes_in_group(proc.pid):  # the workers die with their parent
            assert time.time() < deadline, f"tokenizer workers still running: {processes_in_group(proc.pid)}"
            time.sleep(0.05)
    finally:
        release.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    killed = progress_of(out)
    assert not killed["complete"] and 2 <= len(killed["shards"]) < len(progress_of(ref)["shards"])
    src.unlink()
    shutil.copyfile(full, src)
    proc = run_main(*args)
    assert proc.returncode == 0, proc.stderr
    assert f"resuming: {len(killed['shards'])} finished shards kept" in proc.stdout
    assert shards_of(out) == shards_of(ref)
    assert not list(out.glob("*.tmp"))


def test_resume_from_a_shard_written_but_not_recorded_and_a_damaged_one(tmp_path, run_main):
    """States a kill can leave: a shard renamed but not recorded, a stray .tmp; and a recorded shard
    damaged later: the run goes on from the last good recorded shard and ends identical."""
    docs = make_docs(300, seed=4)
    write_parquet(tmp_path / "a.parquet", docs[:200])
    write_parquet(tmp_path / "b.parquet", docs[200:], first_id=200)
    args = ("--input", f"{tmp_path}/*.parquet", "-s", 700, "-w", 2, "--tokenizer-out", tmp_path / "tok.bin")
    ref = tmp_path / "ref"
    assert run_main(*args, "-o", ref).returncode == 0
    out = tmp_path / "out"
    shutil.copytree(ref, out)
    progress = progress_of(out)
    n = len(progress["shards"])
    assert n >= 8
    progress["shards"] = progress["shards"][:n - 3]  # the last three renamed but never recorded
    progress["complete"] = False
    (out / "fineweb_progress.json").write_text(json.dumps(progress))
    (out / shard_names("fineweb", n)[n - 2]).write_bytes(b"half a shard")  # a partial file under the name
    (out / (shard_names("fineweb", n)[n - 1] + ".tmp")).write_bytes(b"x" * 100)
    victim = out / shard_names("fineweb", n)[4]
    victim.write_bytes(victim.read_bytes()[:-2])  # recorded, then damaged
    proc = run_main(*args, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert f"{victim}: missing or not of the recorded" in proc.stderr
    assert "resuming: 4 finished shards kept" in proc.stdout
    assert shards_of(out) == shards_of(ref)
    assert not list(out.glob("*.tmp")) and progress_of(out) == progress_of(ref)


def test_a_complete_run_is_left_alone_and_other_settings_need_restart(tmp_path, run_main):
    """Running a finished preparation again changes nothing; another --shard-size or input is refused
    naming --restart; --restart makes the shards again (stale higher-numbered ones go)."""
    write_jsonl(tmp_path / "a.jsonl", make_docs(200, seed=5))
    args = ("--input", tmp_path / "a.jsonl", "-o", tmp_path / "out", "-w", 1, "--tokenizer-out", tmp_path / "tok.bin")
    assert run_main(*args, "-s", 500).returncode == 0
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    proc = run_main(*args, "-s", 500)
    assert proc.returncode == 0 and "complete, nothing to do" in proc.stdout, proc.stderr
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == before
    proc = run_main(*args, "-s", 2000)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "--restart" in proc.stderr
    assert "--shard-size 500" in proc.stderr and proc.stderr.count("\n") == 1
    write_jsonl(tmp_path / "b.jsonl", make_docs(10, seed=6))
    proc = run_main("--input", tmp_path / "b.jsonl", *args[2:], "-s", 500)
    assert proc.returncode == 1 and "--restart" in proc.stderr
    proc = run_main(*args, "-s", 2000, "--restart")
    assert proc.returncode == 0, proc.stderr
    n = len(progress_of(tmp_path / "out")["shards"])
    assert set(shards_of(tmp_path / "out")) == set(shard_names("fineweb", n))


def test_shards_without_a_progress_file_are_not_touched(tmp_path, run_main):
    """Shards of unknown origin (llm.c's, or a progress file deleted) stop the run: where they end is unknown."""
    write_jsonl(tmp_path / "a.jsonl", make_docs(20, seed=7))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fineweb_val_000000.bin").write_bytes(b"theirs")
    proc = run_main("--input", tmp_path / "a.jsonl", "-o", tmp_path / "out", "-w", 1)
    assert proc.returncode == 1 and "no fineweb_progress.json" in proc.stderr and "--restart" in proc.stderr
    assert (tmp_path / "out" / "fineweb_val_000000.bin").read_bytes() == b"theirs"


def test_a_changed_input_is_detected_on_resume(tmp_path, run_main):
    """The split document must continue the last kept shard: an edited input is refused."""
    docs = make_docs(200, seed=8)
    src = write_jsonl(tmp_path / "a.jsonl", docs)
    args = ("--input", src, "-o", tmp_path / "out", "-s", 600, "-w", 1, "--tokenizer-out", tmp_path / "tok.bin")
    assert run_main(*args).returncode == 0
    progress = progress_of(tmp_path / "out")
    progress["shards"], progress["complete"] = progress["shards"][:2], False
    (tmp_path / "out" / "fineweb_progress.json").write_text(json.dumps(progress))
    doc = progress["shards"][-1]["next"]["doc"]
    docs[doc] = "something else entirely " + docs[doc]
    write_jsonl(src, docs)
    proc = run_main(*args)
    assert proc.returncode == 1, proc.stdout
    assert f"row {doc} (document {doc}) does not continue fineweb_train_000001.bin" in proc.stderr
    assert "2 finished shards" in proc.stderr


def test_missing_text_column_names_the_file_and_its_columns(tmp_path, run_main):
    """A parquet file and a jsonl row without "text": one error line naming them, nothing written."""
    table = pa.table({"content": ["a", "b"], "id": ["1", "2"], "url": ["u", "v"]})
    pq.write_table(table, tmp_path / "x.parquet")
    proc = run_main("--input", tmp_path / "x.parquet", "-o", tmp_path / "out")
    assert proc.returncode == 1
    assert proc.stderr == f"error: {tmp_path / 'x.parquet'}: no 'text' column (columns: content, id, url)\n"
    assert not list((tmp_path / "out").glob("*.bin"))
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    proc = run_main("--input", tmp_path / "n.parquet", "-o", tmp_path / "out2")
    assert proc.returncode == 1 and "column 'text' has type int64, not string" in proc.stderr
    (tmp_path / "y.jsonl").write_text('{"text": "fine"}\n{"content": "no text", "id": "7"}\n')
    proc = run_main("--input", tmp_path / "y.jsonl", "-o", tmp_path / "out3")
    assert proc.returncode == 1
    assert f"error: {tmp_path / 'y.jsonl'}:2: no 'text' field (fields: content, id);" in proc.stderr


@pytest.mark.parametrize("name,content,needle", [
    ("garbage.parquet", b"this is not parquet at all" * 10, "cannot read as parquet"),
    ("truncated.parquet", None, "cannot read as parquet"),
    ("corrupt.jsonl.gz", b"\x1f\x8b\x08\x00" + b"\xff" * 40, "cannot read"),
    ("bad.jsonl", b'{"text": "ok"}\n{"text": broken\n', ":2: not valid JSON"),
    ("latin1.jsonl", b'{"text": "caf\xe9"}\n', ":1: not UTF-8"),
    ("missing.parquet", False, "no such file"),
    ("notes.txt", b"hello", "unknown input type"),
], ids=["garbage", "truncated", "corrupt-gz", "bad-json", "not-utf8", "missing", "unknown-suffix"])
def test_unreadable_files_are_named(tmp_path, name, content, needle, run_main):
    """Each unreadable input stops with one error line naming the file."""
    path = tmp_path / name
    if content is None:  # the first half of a good parquet file
        good = write_parquet(tmp_path / "good.parquet", make_docs(50, seed=9))
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif content is not False:
        path.write_bytes(content)
    proc = run_main("--input", path, "-o", tmp_path / "out", "-w", 1)
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.startswith(f"error: {path}") and needle in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and not list(tmp_path.glob("out/*.bin"))


def test_a_bad_row_mid_run_keeps_the_finished_shards(tmp_path, run_main):
    """A malformed line found after shards were written: error naming FILE:LINE, the shards stay,
    and after the fix the same command continues to the output of an uninterrupted run."""
    docs = make_docs(1000, seed=10)
    good = write_jsonl(tmp_path / "good.jsonl", docs)
    ref = tmp_path / "ref"
    args = ("-s", 800, "-w", 2, "--tokenizer-out", tmp_path / "tok.bin")
    assert run_main("--input", good, "-o", ref, *args).returncode == 0
    lines = good.read_text().splitlines(keepends=True)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(lines[:900]) + '{"text": "cut off\n' + "".join(lines[901:]))
    out = tmp_path / "out"
    proc = run_main("--input", src, "-o", out, *args)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {src}:901: not valid JSON")
    kept = len(progress_of(out)["shards"])
    assert kept >= 3 and f"{kept} finished shards in {out} kept" in proc.stderr
    src.write_text("".join(lines))
    proc = run_main("--input", src, "-o", out, *args)
    assert proc.returncode == 0, proc.stderr
    assert shards_of(out) == shards_of(ref)


def test_a_full_disk_names_the_shard_and_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    """ENOSPC while the fourth shard is written (half of its .tmp on disk): an error naming it, no
    file under its name, no .tmp; the earlier shards are kept and the next run ends as an
    uninterrupted one."""
    docs = make_docs(300, seed=11)
    src = write_parquet(tmp_path / "a.parquet", docs)
    args = ["--input", str(src), "-s", "900", "-w", "2", "--tokenizer-out", str(tmp_path / "tok.bin")]
    assert fineweb.main(args + ["-o", str(tmp_path / "ref")]) == 0
    real = fineweb.write_shard

    def full_disk(path, tokens):
        """The fourth shard runs out of space halfway through its .tmp."""
        if Path(path).name == "fineweb_train_000003.bin":
            with open(str(path) + ".tmp", "wb") as f:
                f.write(b"\0" * 1024)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) + ".tmp")
        return real(path, tokens)
    monkeypatch.setattr(fineweb, "write_shard", full_disk)
    out = tmp_path / "out"
    capsys.readouterr()
    assert fineweb.main(args + ["-o", str(out)]) == 1
    err = capsys.readouterr().err
    shard = out / "fineweb_train_000003.bin"
    assert err.startswith(f"error: {shard}: disk full while writing (No space left on device)"), err
    assert "3 finished shards" in err and err.count("\n") == 1
    assert not shard.exists() and not list(out.glob("*.tmp"))
    assert set(shards_of(out)) == set(shard_names("fineweb", 3))
    assert len(progress_of(out)["shards"]) == 3
    monkeypatch.setattr(fineweb, "write_shard", real)
    assert fineweb.main(args + ["-o", str(out)]) == 0
    assert shards_of(out) == shards_of(tmp_path / "ref")


def test_an_interrupted_download_keeps_the_shards_and_resumes(tmp_path, monkeypatch, capsys):
    """Online path with the Hub replaced by local files: the third file's download fails: an error
    naming it, the finished shards stay; the next run (which lists nothing again: the revision and
    files are recorded) downloads the rest and ends as a run on the local files; downloads are
    deleted once the shards are past them."""
    docs = make_docs(1200, seed=12)
    names = [f"sample/10BT/{i:03d}_00000.parquet" for i in range(3)]
    local = [write_parquet(tmp_path / "hub" / n, docs[400 * i:400 * (i + 1)], first_id=400 * i, row_group_size=50)
             for i, n in enumerate(names)]
    args = ["-s", "700", "-w", "2", "--tokenizer-out", str(tmp_path / "tok.bin")]
    assert fineweb.main(["--input", *map(str, local), "-o", str(tmp_path / "ref")] + args) == 0
    fails = {names[2]}
    downloaded = []

    def fake_download(repo, revision, name, local_dir):
        """Copy the 'Hub' file into local_dir, or fail like a cut connection."""
        assert (repo, revision) == ("HuggingFaceFW/fineweb", "0123abcd")
        if name in fails:
            raise ConnectionError("Connection reset by peer")
        dest = Path(local_dir) / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "hub" / name, dest)
        downloaded.append(name)
        return str(dest)
    monkeypatch.setattr(fineweb, "hub_list", lambda repo, folder: ("0123abcd", names))
    monkeypatch.setattr(fineweb, "hub_download", fake_download)
    monkeypatch.setattr(fineweb, "hub_num_rows", lambda repo, revision, files: [400] * len(files))
    out = tmp_path / "out"
    capsys.readouterr()
    assert fineweb.main(["-o", str(out)] + args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: HuggingFaceFW/fineweb/{names[2]}: download failed (ConnectionError: "
                          "Connection reset by peer)"), err
    kept = len(progress_of(out)["shards"])
    assert kept >= 2 and f"{kept} finished shards in {out} kept" in err
    assert progress_of(out)["source"] == {"kind": "hub", "repo": "HuggingFaceFW/fineweb", "folder": "sample/10BT",
                                          "revision": "0123abcd", "files": names}

    def no_listing(repo, folder):
        raise AssertionError("a resumed run lists the Hub again")
    monkeypatch.setattr(fineweb, "hub_list", no_listing)
    fails.clear()
    downloaded.clear()
    assert fineweb.main(["-o", str(out)] + args) == 0
    assert shards_of(out) == shards_of(tmp_path / "ref")
    assert names[0] not in downloaded  # the finished shards were past it already
    assert not list((out / "download").rglob("*.parquet"))


def test_online_without_huggingface_hub_names_the_pip_command(tmp_path):
    """No --input and no huggingface_hub: one error line with the pip command."""
    proc = run_cli("-o", tmp_path / "out", env={"BLOCK_MODULES": "huggingface_hub"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: downloading FineWeb needs the huggingface_hub package: ")
    assert "-m pip install huggingface_hub" in proc.stderr and proc.stderr.count("\n") == 1


def test_help_documents_every_option_and_the_behaviour():
    """--help lists every option and explains sources, naming, resuming, progress and errors."""
    proc = run_cli("--help")
    assert proc.returncode == 0
    text = proc.stdout
    options = [o for action in fineweb.build_parser()._actions for o in action.option_strings]
    assert {"--type", "--version", "--input", "--out-dir", "--shard-size", "--workers", "--restart",
            "--download-dir", "--keep-downloads", "--tokenizer-out"} <= set(options)
    for option in options:
        assert re.search(rf"(^|[\s,]){re.escape(option)}\b", text), option
    for needle in ("sample-10BT", "sample-100BT", "HuggingFaceFW/fineweb-edu", "fineweb_val_000000.bin",
                   "edufineweb_", "<|endoftext|>", "20240520", "_progress.json", "skip", "tqdm", "ETA",
                   "disk full", "download", "pip install huggingface_hub", "exit status", ".jsonl.gz", "pyarrow"):
        assert needle in text, needle


def test_bad_numbers_are_rejected(tmp_path, run_main):
    """--shard-size and --workers must be positive."""
    write_jsonl(tmp_path / "a.jsonl", make_docs(5, seed=13))
    for flag, value in (("-s", 0), ("-s", 2**31), ("-w", 0)):
        proc = run_main("--input", tmp_path / "a.jsonl", "-o", tmp_path / "out", flag, value)
        assert proc.returncode == 1 and proc.stderr.startswith("error: --"), proc.stderr


def test_the_gpt2_124m_fineweb_sweep_file_is_valid():
    """scripts/sweeps/gpt2_124m_fineweb.toml: valid for scripts/sweep.py, llm.c's hyperparameters in every
    run, FineWeb shards and HellaSwag, each build once."""
    sweep = REPO / "scripts" / "sweeps" / "gpt2_124m_fineweb.toml"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "sweep.py"), str(sweep), "--dry-run"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    builds = re.findall(r"^build: make -j\d+ (\S+)", proc.stdout, re.M)
    assert len(builds) == len(set(builds)) and "build/bf16/train_gpt2cu" in builds
    runs = dict(re.findall(r"^(\S+) \(run\): (.*)$", proc.stdout, re.M))
    assert "bf16" in runs and len(runs) >= 5
    llmc = "-e d12 -b 64 -t 1024 -d 524288 -x 18865 -l 6e-4 -u 700 -q 0.0 -c 0.1"
    for cmd in runs.values():
        assert llmc in cmd and "-v 250" in cmd and "-h 1" in cmd, cmd
        assert "data/fineweb10B/fineweb_train_*.bin" in cmd and "data/fineweb10B/fineweb_val_*.bin" in cmd
