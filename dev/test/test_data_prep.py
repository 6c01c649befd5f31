"""Tests for dev/data: tokenizer setup, shard and tokenizer writers, Tiny Shakespeare and Gutenberg CLIs."""
import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA_DIR))
import data_common  # noqa: E402
import gutenberg  # noqa: E402
from offline import offline_argv  # noqa: E402

SHARED = data_common.shared_data_dir()
needs_shared = pytest.mark.skipif(SHARED is None, reason="shared data folder not found")
EOT_BYTES = b"<|endoftext|>"


def run_script(name, *args):
    """Run a dev/data script as a subprocess and return its stdout."""
    proc = subprocess.run([sys.executable, str(DATA_DIR / name), *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_offline(script, *args, **env):
    """Run a script with no network and the given extra environment; return the CompletedProcess."""
    return subprocess.run(offline_argv(script, *args),
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def read_shard(path):
    """Read a token shard, checking its header and length; return the tokens."""
    raw = Path(path).read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert list(header[:3]) == [20240520, 1, (len(raw) - 1024) // 2]
    assert not header[3:].any()
    assert len(raw) == 1024 + 2 * header[2] and header[2] > 0
    return np.frombuffer(raw[1024:], dtype="<u2")


@pytest.fixture(scope="module")
def enc():
    """The GPT-2 encoding through data_common."""
    return data_common.get_gpt2_encoding()


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    """Run tinyshakespeare.py once into a temporary folder."""
    out = tmp_path_factory.mktemp("tinyshakespeare")
    stdout = run_script("tinyshakespeare.py", "--out-dir", out, "--tokenizer-out", out / "tok.bin")
    return out, stdout


def test_hello_world(enc):
    """The known encoding of "Hello world"."""
    assert enc.encode("Hello world") == [15496, 995]


@needs_shared
def test_tinyshakespeare_counts(shakespeare):
    """The canonical input gives 32,768 val + 305,260 train tokens with valid headers."""
    out, stdout = shakespeare
    val = read_shard(out / "tiny_shakespeare_val.bin")
    train = read_shard(out / "tiny_shakespeare_train.bin")
    assert (len(val), len(train)) == (32768, 305260)
    assert val[0] == 50256
    assert (out / "tiny_shakespeare_train.bin").stat().st_size == 1024 + 2 * 305260
    assert "305,260" in stdout


@needs_shared
def test_offline_with_foreign_tiktoken_cache(tmp_path, shakespeare):
    """TIKTOKEN_CACHE_DIR at an empty folder and no network: the shared BPE files are used, the
    tokens are the usual ones, and nothing is written into the caller's cache folder."""
    cache = tmp_path / "empty_cache"
    cache.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(f"import sys; sys.path.insert(0, {str(DATA_DIR)!r}); import data_common\n"
                     "print(data_common.get_gpt2_encoding().encode('Hello world'))\n")
    # control: without the shared files tiktoken must download, and the blocked network stops it
    proc = run_offline(probe, TIKTOKEN_CACHE_DIR=cache, LLMC_SHARED_DATA=tmp_path / "no_such_folder")
    assert proc.returncode != 0 and "network access is blocked" in proc.stderr
    proc = run_offline(probe, TIKTOKEN_CACHE_DIR=cache)
    assert proc.returncode == 0 and proc.stdout.strip() == "[15496, 995]", proc.stderr
    out = tmp_path / "ts"
    proc = run_offline(DATA_DIR / "tinyshakespeare.py", "--out-dir", out, "--tokenizer-out", out / "tok.bin",
                       TIKTOKEN_CACHE_DIR=cache)
    assert proc.returncode == 0, proc.stderr
    for name in ("tiny_shakespeare_val.bin", "tiny_shakespeare_train.bin", "tok.bin"):
        assert (out / name).read_bytes() == (shakespeare[0] / name).read_bytes(), name
    assert (len(read_shard(out / "tiny_shakespeare_val.bin")), len(read_shard(out / "tiny_shakespeare_train.bin"))) \
        == (32768, 305260)
    proc = run_offline(DATA_DIR / "gutenberg.py", "--max-books", 1, "--workers", 2, "--out-dir", tmp_path / "gb",
                       "--tokenizer-out", tmp_path / "gb" / "tok.bin", TIKTOKEN_CACHE_DIR=cache)
    assert proc.returncode == 0 and read_shard(tmp_path / "gb" / "gutenberg_train_000000.bin")[0] == 50256, proc.stderr
    assert list(cache.iterdir()) == []


@needs_shared
def test_tinyshakespeare_skip_and_force(shakespeare):
    """A second run skips up-to-date outputs; --force rewrites them."""
    out, _ = shakespeare
    args = ("--out-dir", out, "--tokenizer-out", out / "tok.bin")
    assert "up to date" in run_script("tinyshakespeare.py", *args)
    assert "wrote" in run_script("tinyshakespeare.py", *args, "--force")


@needs_shared
def test_tokenizer_file(shakespeare, enc):
    """Header fields and the bytes of a random sample of tokens plus <|endoftext|>."""
    raw = (shakespeare[0] / "tok.bin").read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert list(header[:4]) == [20240328, 2, 50257, 50256]
    tokens, pos = [], 1024
    for _ in range(50257):
        n = raw[pos]
        assert n >= 1
        tokens.append(raw[pos + 1:pos + 1 + n])
        pos += 1 + n
    assert pos == len(raw)
    for i in random.Random(0).sample(range(50257), 1000) + [50256]:
        assert tokens[i] == enc.decode_single_token_bytes(i)
    assert tokens[50256] == EOT_BYTES


def test_write_shard_rejects(tmp_path):
    """Out-of-range tokens and empty input raise ValueError naming the path and leave no file."""
    path = tmp_path / "bad.bin"
    for bad in ([1, 2, 65536], [-1], []):
        with pytest.raises(ValueError, match="bad.bin"):
            data_common.write_shard(path, bad)
    assert list(tmp_path.iterdir()) == []


def test_write_shard_roundtrip(tmp_path):
    """A small shard reads back unchanged, 65535 included."""
    path = tmp_path / "ok.bin"
    data_common.write_shard(path, [0, 50256, 65535])
    assert list(read_shard(path)) == [0, 50256, 65535]
    assert path.stat().st_size == 1024 + 6


def test_write_split_packs_and_cleans(tmp_path):
    """Documents are packed across shards and stale higher-numbered shards are removed."""
    (tmp_path / "gutenberg_train_000007.bin").write_bytes(b"stale")
    docs = [np.arange(1, 6, dtype=np.uint16), np.arange(10, 13, dtype=np.uint16)]
    total, shards = gutenberg.write_split(iter(docs), tmp_path, "train", 3)
    assert (total, shards) == (8, 3)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"gutenberg_train_00000{i}.bin" for i in range(3)]
    got = [list(read_shard(tmp_path / n)) for n in names]
    assert got == [[1, 2, 3], [4, 5, 10], [11, 12]]


@needs_shared
def test_gutenberg_two_books(tmp_path, enc):
    """Two books give several shards that decode back to <|endoftext|> + each book's text."""
    src = SHARED / "gutenberg"
    run_script("gutenberg.py", "--max-books", 2, "--shard-size", 100000,
               "--out-dir", tmp_path, "--tokenizer-out", tmp_path / "tok.bin")
    shards = sorted(tmp_path.glob("gutenberg_train_*.bin"))
    assert len(shards) >= 2 and not list(tmp_path.glob("gutenberg_val_*.bin"))
    parts = [read_shard(p) for p in shards]
    assert all(len(p) == 100000 for p in parts[:-1]) and 0 < len(parts[-1]) <= 100000
    tokens = np.concatenate(parts).tolist()
    books = json.loads((src / "manifest.json").read_text())["books"][:2]
    data = gzip.open(src / "gutenberg_en_train.txt.gz").read()
    expected = b"".join(EOT_BYTES + data[b["offset"]:b["offset"] + b["clean_bytes"]] for b in books)
    assert enc.decode_bytes(tokens) == expected
    assert tokens.count(50256) == 2


RAW_BOOK = (
    "\ufeffThe Project Gutenberg eBook of Test\r\nTitle: Test\r\n\r\n"
    "*** START OF THE PROJECT GUTENBERG EBOOK TEST ***\r\n\r\n\r\n"
    "CHAPTER I   \r\nIt was a dark night.\t \r\n" + "\r\n" * 6 + "The end. \r\n\r\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK TEST ***\r\nSection 1. General Terms of Use\r\n"
    "*** END OF THE PROJECT GUTENBERG EBOOK TEST ***\r\n"
)
CLEAN_BOOK = "CHAPTER I\nIt was a dark night.\n\n\nThe end."


def test_clean_gutenberg():
    """Header, license, CRLF, trailing blanks and long blank runs are handled."""
    assert gutenberg.clean_gutenberg(RAW_BOOK) == CLEAN_BOOK
    assert gutenberg.clean_gutenberg(RAW_BOOK.replace("THE PROJECT", "THIS PROJECT")) == CLEAN_BOOK
    with pytest.raises(ValueError):
        gutenberg.clean_gutenberg("no markers here\n")


def test_download_offline(tmp_path, monkeypatch):
    """--download's pipeline, with the network replaced by a fake fetch, yields loadable books."""
    def fake_fetch(url, path, timeout=60):
        """Write a synthetic raw book named after the URL's id."""
        book_id = url.rsplit("pg", 1)[1].split(".")[0]
        Path(path).write_bytes(RAW_BOOK.replace("dark", f"dark {book_id}").encode("utf-8"))
    monkeypatch.setattr(gutenberg, "fetch_url", fake_fetch)
    gutenberg.download_books(tmp_path, ids=(7, 8, 9), val_ids={8}, delay=0)
    books = gutenberg.load_books(tmp_path)
    assert books == [(s, CLEAN_BOOK.replace("dark", f"dark {i}")) for s, i in (("train", 7), ("val", 8), ("train", 9))]
