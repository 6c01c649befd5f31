"""Shared helpers for the data-preparation scripts: shared-data lookup, the GPT-2
tokenizer (offline through the shared BPE files), and writers for the binary formats
of doc/FORMATS.md (token shards and the tokenizer file)."""
import filecmp
import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
EOT = 50256
# tiktoken looks for its downloads under sha1(url) in $TIKTOKEN_CACHE_DIR
TIKTOKEN_FILES = {
    "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
    "encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "r50k_base.tiktoken": "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4",
}


def shared_data_dir():
    """Return the shared data folder ($LLMC_SHARED_DATA, ../shared/data, shared/data) or None."""
    env = os.environ.get("LLMC_SHARED_DATA")
    if env is not None:
        return Path(env) if Path(env).is_dir() else None
    for cand in (REPO.parent / "shared" / "data", REPO / "shared" / "data"):
        if cand.is_dir():
            return cand
    return None


def shared_sha256(relpath):
    """Return the sha256 listed for relpath in the shared SHA256SUMS, or None."""
    shared = shared_data_dir()
    sums = shared / "SHA256SUMS" if shared else None
    if not sums or not sums.is_file():
        return None
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == relpath:
            return parts[0]
    return None


def file_sha256(path):
    """Return the hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shared_bpe_cache():
    """Return a tiktoken cache folder holding the shared BPE files under tiktoken's names, or None.

    The folder is ours (data/tiktoken_cache, else one under the temp dir), filled from the shared
    gpt2/ files, so that a caller's TIKTOKEN_CACHE_DIR without them cannot send tiktoken online."""
    shared = shared_data_dir()
    src_dir = shared / "gpt2" if shared else None
    if not src_dir or not all((src_dir / name).is_file() for name in ("vocab.bpe", "encoder.json")):
        return None  # the two files of the gpt2 encoding
    for cache in (REPO / "data" / "tiktoken_cache", Path(tempfile.gettempdir()) / f"llmc-tiktoken-{os.getuid()}"):
        try:
            cache.mkdir(parents=True, exist_ok=True)
            for name, key in TIKTOKEN_FILES.items():
                src, dst = src_dir / name, cache / key
                if src.is_file() and (not dst.is_file() or not filecmp.cmp(src, dst, shallow=False)):
                    tmp = dst.with_name(f"{key}.{os.getpid()}.tmp")
                    shutil.copyfile(src, tmp)
                    os.replace(tmp, dst)  # atomic: concurrent runs (gutenberg's workers) never see half a file
            return cache
        except OSError:
            continue  # read-only checkout: try the next folder
    return None


def get_gpt2_encoding():
    """Return tiktoken's gpt2 encoding, from the shared BPE files when they exist (whatever the
    caller's TIKTOKEN_CACHE_DIR holds: it is restored afterwards), else tiktoken's own cache/download."""
    import tiktoken

    cache = shared_bpe_cache()
    if cache is None:
        return tiktoken.get_encoding("gpt2")
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)  # tiktoken reads it when it loads the files
    try:
        return tiktoken.get_encoding("gpt2")
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


def atomic_write(path, chunks):
    """Write byte chunks to path + '.tmp', then rename it over path."""
    path = str(path)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


def write_shard(path, tokens):
    """Write a token shard: 256 int32 header (magic, version, N), then N uint16 tokens."""
    arr = np.asarray(tokens)
    if arr.size == 0:
        raise ValueError(f"{path}: tokens: empty input, a shard needs at least one token")
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{path}: tokens: expected a flat sequence of integers")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > 65535:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{path}: tokens: value {bad} outside [0, 65535]")
    header = np.zeros(256, dtype="<i4")
    header[:3] = SHARD_MAGIC, SHARD_VERSION, arr.size
    atomic_write(path, [header.tobytes(), arr.astype("<u2").tobytes()])


def write_tokenizer(path, enc):
    """Write the tokenizer file: header (magic, version 2, V, eot), then length-prefixed token bytes."""
    n_vocab = enc.n_vocab
    header = np.zeros(256, dtype="<i4")
    header[:4] = TOKENIZER_MAGIC, TOKENIZER_VERSION, n_vocab, EOT
    body = bytearray()
    for i in range(n_vocab):
        b = enc.decode_single_token_bytes(i)
        if not 1 <= len(b) <= 255:
            raise ValueError(f"{path}: token {i}: length {len(b)} outside [1, 255]")
        body += bytes((len(b),)) + b
    atomic_write(path, [header.tobytes(), bytes(body)])


def fetch_url(url, path, timeout=60):
    """Download url to path (atomically), with a network timeout in seconds."""
    req = urllib.request.Request(url, headers={"User-Agent": "llmc-data-prep/1.0"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data = resp.read()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, [data])
    return path


def newer_than(outputs, source):
    """True if every output exists and is newer than source."""
    src_mtime = os.path.getmtime(source)
    return all(os.path.isfile(p) and os.path.getmtime(p) >= src_mtime for p in outputs)
