"""Tokenize FineWeb or FineWeb-Edu with GPT-2 BPE into llm.c token shards.

Sources
  online   (no --input) the Hugging Face Hub dataset HuggingFaceFW/fineweb (--type classic) or
           HuggingFaceFW/fineweb-edu (--type edu), sample sample-10BT or sample-100BT (--version
           10B / 100B): the parquet files of sample/10BT/ (or sample/100BT/), in file-name order,
           pinned to the revision seen at the first run (-t, -v and -s are llm.c's
           dev/data/fineweb.py flags). Needs `pip install huggingface_hub` (and network); each file is
           downloaded into --download-dir (the next one in the background while this one is
           tokenized) and deleted once every finished shard is past it (--keep-downloads keeps them).
  offline  --input PATTERN...: local FineWeb files, each a parquet file (read with pyarrow) or
           JSON lines (.jsonl, .jsonl.gz), one document per row in the column / key "text" (other
           columns, e.g. id, dump, url, are ignored). Patterns are shell globs, quoted; the files of
           one pattern are taken in sorted order, the patterns in the order given.

Output (llm.c's dev/data/fineweb.py naming and format)
  OUT_DIR/fineweb_val_000000.bin, fineweb_train_000001.bin, ... (--type edu: edufineweb_...): the
  first shard is the validation shard, the others training shards, --shard-size tokens each (100M)
  except the last. Every document is <|endoftext|> (50256) then its tiktoken `gpt2` tokens
  (encode_ordinary); documents are packed back to back and a document that does not fit in a shard
  continues at the start of the next one. Each shard: 256 int32 header words (20240520, 1, number of
  tokens, zeros), then the tokens as uint16. Also the tokenizer file (--tokenizer-out) for samples.

Resuming
  A shard is written to NAME.tmp and renamed, then recorded in OUT_DIR/<prefix>_progress.json
  (written the same way). For every finished shard that file holds its token count and where the
  next shard starts: document number, input file and row, and how many tokens of that document
  the finished shards already hold (the document split across the boundary; 1..its length). Run
  the same command again after a kill, a crash, Ctrl-C or an error: the recorded shards are checked
  (present, recorded size) and kept, the input is reopened at the recorded file and row (whole
  parquet row groups and earlier files are skipped without reading them; online, earlier files
  are not downloaded again), the split document is tokenized again and its first tokens are
  compared with the end of the last kept shard (another input stops with an error), and writing
  goes on with the next shard. A shard renamed but not yet recorded is simply written again. A
  finished run (the progress file says complete) is left as it is. The progress file also records
  the source (the input files, or the Hub repository, revision and file list) and --shard-size;
  resuming with others is an error: give another --out-dir or --restart.

Progress
  On a terminal, a tqdm bar on stderr: documents done / total, documents per second, tokens
  written, current shard and the ETA (totals from the parquet metadata, the line count of local
  jsonl files, or the Hub files' parquet footers). A line per finished shard on stdout.

Errors (one `error: ...` line on stderr, exit status 1; finished shards are always kept)
  a missing "text" column / key (names the file, or FILE:LINE, and the columns it has), an
  unreadable or corrupt file (names it), a full disk ("disk full while writing", naming the shard
  or progress file being written; its partial .tmp is removed, nothing partial is left under a
  final name), a failed or interrupted download (names the repository file), missing
  huggingface_hub or pyarrow (names the pip command). Ctrl-C stops with exit status 130 (the
  tokenizer processes die with the main process, also when that is killed). Run the same command
  again to continue.
"""
import argparse
import errno
import glob
import gzip
import json
import os
import re
import signal
import stat
import sys
import threading
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from data_common import EOT, REPO, SHARD_MAGIC, SHARD_VERSION, get_gpt2_encoding, write_shard, write_tokenizer

# --type: Hub repository, shard-name prefix, stem of the default output folder (llm.c's names)
DATASETS = {
    "classic": ("HuggingFaceFW/fineweb", "fineweb", "fineweb"),
    "edu": ("HuggingFaceFW/fineweb-edu", "edufineweb", "edu_fineweb"),
}
VERSIONS = {"10B": "sample/10BT", "100B": "sample/100BT"}  # --version: the sample's folder in the repository
SHARD_SIZE = 10**8
PROGRESS_FORMAT = 1
BATCH_DOCS = 64          # documents per tokenizer task
TASKS_PER_WORKER = 2     # tasks in flight per worker: bounds what is read ahead of the writer
TEXT = "text"
INPUT_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz")

_ENC = None  # the encoding of a worker process


class PrepError(Exception):
    """A problem that stops the preparation; printed as `error: <message>`."""


def build_parser():
    """The command-line parser (its help is the documentation)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", "--type", choices=sorted(DATASETS), default="classic",
                   help="FineWeb (classic) or FineWeb-Edu (edu): the Hub repository and the shard names "
                        "(fineweb_* / edufineweb_*) (default: %(default)s)")
    p.add_argument("-v", "--version", choices=sorted(VERSIONS), default="10B",
                   help="online: the sample, sample-10BT or sample-100BT (default: %(default)s)")
    p.add_argument("-i", "--input", nargs="+", metavar="PATTERN",
                   help="offline: local .parquet / .jsonl / .jsonl.gz files or quoted globs, e.g. "
                        "'fw/*.parquet' (default: download from the Hub)")
    p.add_argument("-o", "--out-dir", type=Path,
                   help="folder for the shards and the progress file (default: data/fineweb10B, "
                        "data/edu_fineweb10B, data/fineweb100B or data/edu_fineweb100B under the repository)")
    p.add_argument("-s", "--shard-size", type=int, default=SHARD_SIZE,
                   help="tokens per shard, the last one may have fewer (default: %(default)s)")
    p.add_argument("-w", "--workers", type=int, default=os.cpu_count() or 1,
                   help="tokenizer processes (default: the number of CPUs, %(default)s)")
    p.add_argument("--restart", action="store_true",
                   help="delete this prefix's shards and progress file in --out-dir first and start over")
    p.add_argument("--download-dir", type=Path,
                   help="online: where the parquet files are downloaded (default: OUT_DIR/download)")
    p.add_argument("--keep-downloads", action="store_true",
                   help="online: keep the downloaded parquet files (default: delete each one once the "
                        "finished shards are past it)")
    p.add_argument("--tokenizer-out", type=Path, default=REPO / "data" / "gpt2_tokenizer.bin",
                   help="tokenizer file to write, for decoding samples (default: %(default)s)")
    return p


def parse_args(argv=None):
    """Parse the command line."""
    return build_parser().parse_args(argv)


# ------------------------------------------------------------------------------------------------
# Reading documents


def expand_inputs(patterns):
    """The files of --input: each pattern's matches in sorted order; PrepError for a pattern without
    a match, a missing file, an unknown suffix or a file listed twice."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            magic = any(c in pattern for c in "*?[")
            raise PrepError(f"{pattern}: no file matches" if magic else f"{pattern}: no such file")
        for path in matches:
            if not path.endswith(INPUT_SUFFIXES):
                raise PrepError(f"{path}: unknown input type (expected {', '.join(INPUT_SUFFIXES)})")
            path = os.path.abspath(path)
            if path in files:
                raise PrepError(f"{path}: given twice")
            files.append(path)
    return files


def import_pyarrow():
    """pyarrow and pyarrow.parquet, or PrepError naming the pip command."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise PrepError(f"reading parquet needs pyarrow ({e}): {sys.executable} -m pip install pyarrow") from None
    return pyarrow, pyarrow.parquet


def open_parquet(path):
    """A pyarrow ParquetFile whose "text" column is a string column; PrepError naming the file otherwise."""
    pa, pq = import_pyarrow()
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
    except (OSError, pa.ArrowException) as e:
        raise PrepError(f"{path}: cannot read as parquet ({e})") from None
    if TEXT not in schema.names:
        raise PrepError(f"{path}: no '{TEXT}' column (columns: {', '.join(schema.names) or 'none'})")
    kind = schema.field(TEXT).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(kind))):
        raise PrepError(f"{path}: column '{TEXT}' has type {kind}, not string")
    return pf


def read_parquet(path, start_row=0):
    """Yield (row, text) of a parquet file from start_row on; row groups before it are not read."""
    pa, _ = import_pyarrow()
    pf = open_parquet(path)
    meta = pf.metadata
    row, groups, skip = 0, [], 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if row + n <= start_row:
            row += n
            continue
        if not groups:
            skip, row = start_row - row, start_row
        groups.append(g)
    if not groups:
        return
    try:
        for batch in pf.iter_batches(batch_size=1024, row_groups=groups, columns=[TEXT], use_threads=False):
            texts = batch.column(0).to_pylist()[skip:]
            skip = max(0, skip - batch.num_rows)
            for text in texts:
                if text is None:
                    raise PrepError(f"{path}: row {row}: '{TEXT}' is null")
                yield row, text
                row += 1
    except (OSError, pa.ArrowException) as e:
        raise PrepError(f"{path}: cannot read as parquet ({e})") from None


def jsonl_text(path, lineno, line):
    """The "text" of one JSON line; PrepError naming FILE:LINE otherwise."""
    try:
        obj = json.loads(line)
    except UnicodeDecodeError as e:
        raise PrepError(f"{path}:{lineno}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise PrepError(f"{path}:{lineno}: not valid JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(obj, dict):
        raise PrepError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    if TEXT not in obj:
        raise PrepError(f"{path}:{lineno}: no '{TEXT}' field (fields: {', '.join(obj) or 'none'})")
    if not isinstance(obj[TEXT], str):
        raise PrepError(f"{path}:{lineno}: '{TEXT}' is {type(obj[TEXT]).__name__}, not a string")
    return obj[TEXT]


def read_jsonl(path, start_row=0):
    """Yield (row, text) of a JSON-lines file (gzip when it ends in .gz) from start_row on; rows are
    the non-blank lines, counted from 0."""
    opener = gzip.open if path.endswith(".gz") else open
    row = 0
    try:
        with opener(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if row >= start_row:
                    yield row, jsonl_text(path, lineno, line)
                row += 1
    except (OSError, EOFError, zlib.error) as e:
        raise PrepError(f"{path}: cannot read ({e})") from None


def read_file(path, start_row=0):
    """Yield (row, text) of an input file of either kind."""
    return read_parquet(path, start_row) if path.endswith(".parquet") else read_jsonl(path, start_row)


def count_rows(path):
    """Documents in a local file: parquet metadata, or the lines of a regular jsonl file; None when
    unknown (a pipe). Opening a parquet file here also checks its footer and "text" column."""
    if path.endswith(".parquet"):
        return open_parquet(path).metadata.num_rows
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        lines, last = 0, b"\n"
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                lines += block.count(b"\n")
                last = block[-1:]
        return lines + (last != b"\n")
    except (OSError, EOFError, zlib.error) as e:
        raise PrepError(f"{path}: cannot read ({e})") from None


class LocalSource:
    """Local input files, read in the order given."""

    def __init__(self, files):
        self.files = files

    def identity(self):
        """What the progress file records to recognize this input."""
        return {"kind": "files", "files": self.files}

    def total_documents(self):
        """Documents in all files, or None when a file's count is unknown."""
        counts = [count_rows(path) for path in self.files]
        return None if None in counts else sum(counts)

    def documents(self, start):
        """Yield (file index, row, text) from start = (file index, row) on."""
        first_file, first_row = start
        for i in range(first_file, len(self.files)):
            for row, text in read_file(self.files[i], first_row if i == first_file else 0):
                yield i, row, text

    def passed(self, file_index):
        """Called when the finished shards no longer need files before file_index (nothing to do)."""

    def close(self):
        """Release resources (nothing to do)."""


# ------------------------------------------------------------------------------------------------
# The Hugging Face Hub (imported lazily: offline use needs neither huggingface_hub nor network)


def import_hub():
    """The huggingface_hub module, or PrepError naming the pip command."""
    try:
        import huggingface_hub
    except ImportError:
        raise PrepError("downloading FineWeb needs the huggingface_hub package: "
                        f"{sys.executable} -m pip install huggingface_hub (or give local files with --input)") from None
    return huggingface_hub


def hub_list(repo, folder):
    """(revision, sorted parquet files under folder) of a Hub dataset repository."""
    api = import_hub().HfApi()
    revision = api.dataset_info(repo).sha
    names = api.list_repo_files(repo, repo_type="dataset", revision=revision)
    return revision, sorted(n for n in names if n.startswith(folder + "/") and n.endswith(".parquet"))


def hub_download(repo, revision, name, local_dir):
    """Download one file of a Hub dataset into local_dir (resumable); return its local path."""
    return import_hub().hf_hub_download(repo_id=repo, filename=name, repo_type="dataset", revision=revision,
                                        local_dir=str(local_dir))


def hub_num_rows(repo, revision, names):
    """Rows of each Hub parquet file, from the footers (a few small range requests per file)."""
    hub = import_hub()
    _, pq = import_pyarrow()
    fs = hub.HfFileSystem()

    def rows(name):
        """Rows of one file, from its footer."""
        with fs.open(f"datasets/{repo}@{revision}/{name}", "rb", block_size=1 << 16) as f:
            return pq.ParquetFile(f).metadata.num_rows

    with ThreadPoolExecutor(8) as ex:
        return list(ex.map(rows, names))


class Background:
    """fn(*args) in a daemon thread (a download left running never holds up the exit)."""

    def __init__(self, fn, *args):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self.thread.start()

    def _run(self, fn, *args):
        try:
            self.result = fn(*args)
        except BaseException as e:  # handed to the caller of get()
            self.error = e

    def get(self):
        """Wait for the result; re-raise the exception fn raised."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


class HubSource:
    """FineWeb parquet files on the Hub: downloaded one at a time, the next one in the background."""

    def __init__(self, repo, folder, download_dir, keep, recorded=None):
        self.repo, self.folder, self.download_dir, self.keep = repo, folder, Path(download_dir), keep
        if recorded:  # resume: the revision and files of the first run
            self.revision, self.files = recorded["revision"], list(recorded["files"])
        else:
            try:
                self.revision, self.files = hub_list(repo, folder)
            except PrepError:
                raise
            except Exception as e:  # network and Hub errors of any kind
                raise PrepError(f"{repo}: cannot list the files on the Hugging Face Hub ({type(e).__name__}: {e}); "
                                "check the network, or give local files with --input") from None
            if not self.files:
                raise PrepError(f"{repo}: no parquet files under {folder}/ on the Hugging Face Hub")

    def identity(self):
        """What the progress file records to recognize this input."""
        return {"kind": "hub", "repo": self.repo, "folder": self.folder, "revision": self.revision,
                "files": self.files}

    def total_documents(self):
        """Documents in all files (parquet footers over the network), or None when that fails."""
        try:
            return sum(hub_num_rows(self.repo, self.revision, self.files))
        except Exception as e:  # only the progress bar's total depends on it
            print(f"note: no document total for the ETA ({type(e).__name__}: {e})", file=sys.stderr)
            return None

    def _download(self, i):
        """Download file i; PrepError naming it on any failure."""
        name = self.files[i]
        try:
            return hub_download(self.repo, self.revision, name, self.download_dir)
        except Exception as e:  # network, HTTP, disk: any failure of the download
            raise PrepError(f"{self.repo}/{name}: download failed ({type(e).__name__}: {e})") from None

    def documents(self, start):
        """Yield (file index, row, text) from start = (file index, row) on."""
        first_file, first_row = start
        task = Background(self._download, first_file) if first_file < len(self.files) else None
        for i in range(first_file, len(self.files)):
            path = task.get()
            task = Background(self._download, i + 1) if i + 1 < len(self.files) else None
            for row, text in read_parquet(path, first_row if i == first_file else 0):
                yield i, row, text

    def passed(self, file_index):
        """Delete the downloads of the files before file_index (unless --keep-downloads)."""
        if not self.keep:
            for name in self.files[:file_index]:
                (self.download_dir / name).unlink(missing_ok=True)

    def close(self):
        """Nothing to release: a download still running is a daemon thread."""


# ------------------------------------------------------------------------------------------------
# Tokenizing


def init_worker():
    """Per worker process: leave Ctrl-C to the parent, load the encoding once. (A worker whose parent
    is gone, even killed by SIGKILL, exits: the pool's task pipe reaches end of file.)"""
    global _ENC
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _ENC = get_gpt2_encoding()


def tokenize_texts(texts):
    """Tokenize documents: (lengths, concatenated tokens), each document <|endoftext|> + its tokens."""
    docs = [[EOT] + _ENC.encode_ordinary(text) for text in texts]
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    return lengths, np.fromiter((t for d in docs for t in d), dtype=np.uint16, count=int(lengths.sum()))


def batched(items, n):
    """Lists of n consecutive items (the last one shorter)."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


# ------------------------------------------------------------------------------------------------
# Shards and the progress file


def shard_name(prefix, index):
    """llm.c's shard name: shard 0 is the validation shard."""
    return f"{prefix}_{'val' if index == 0 else 'train'}_{index:06d}.bin"


def shard_pattern(prefix):
    """A regex matching this prefix's shard names (and their .tmp files); group 1 is the index."""
    return re.compile(rf"^{re.escape(prefix)}_(?:val|train)_(\d{{6}})\.bin(\.tmp)?$")


def save_file(path, write):
    """Run write(path) (which writes path.tmp and renames it); on OSError remove the .tmp and raise
    PrepError naming path (a full disk as such)."""
    try:
        write(path)
    except OSError as e:
        Path(str(path) + ".tmp").unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise PrepError(f"{path}: disk full while writing ({e.strerror}); the partial {Path(path).name}.tmp "
                            "was removed") from None
        raise PrepError(f"{path}: cannot write ({e.strerror or e})") from None


def shard_ok(path, tokens):
    """Whether a shard file exists with the header and length of `tokens` tokens."""
    try:
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(12), dtype="<i4")
        return (os.path.getsize(path) == 1024 + 2 * tokens and len(header) == 3
                and list(header) == [SHARD_MAGIC, SHARD_VERSION, tokens])
    except OSError:
        return False


class Progress:
    """The progress file OUT_DIR/<prefix>_progress.json: the source, the shard size, and per finished
    shard its name, tokens and where the next shard starts ("next": document, file, row and the
    tokens of that document already written, or null after the last shard)."""

    def __init__(self, path, source, shard_size, shards=(), complete=False, totals=None):
        self.path, self.source, self.shard_size = Path(path), source, shard_size
        self.shards, self.complete, self.totals = list(shards), complete, totals or {}

    @classmethod
    def load(cls, path):
        """Read a progress file (None when there is none); PrepError when it is not one of ours."""
        try:
            data = json.loads(Path(path).read_text())
            if data.get("format") != PROGRESS_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {PROGRESS_FORMAT}")
            return cls(path, data["source"], data["shard_size"], data["shards"], data["complete"], data.get("totals"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise PrepError(f"{path}: not a readable progress file ({e}); --restart starts over") from None

    def save(self):
        """Write the file atomically; PrepError naming it on failure."""
        data = {"format": PROGRESS_FORMAT, "source": self.source, "shard_size": self.shard_size,
                "complete": self.complete, "totals": self.totals, "shards": self.shards}
        text = json.dumps(data, indent=1) + "\n"

        def write(path):
            """Write path.tmp, then rename it."""
            with open(str(path) + ".tmp", "w") as f:
                f.write(text)
            os.replace(str(path) + ".tmp", path)

        save_file(self.path, write)


class ShardWriter:
    """Packs documents into shards of shard_size tokens, writes each one and records it."""

    def __init__(self, out_dir, prefix, progress, on_shard):
        self.out_dir, self.prefix, self.progress, self.on_shard = Path(out_dir), prefix, progress, on_shard
        self.buf = np.empty(progress.shard_size, dtype=np.uint16)
        self.fill = 0

    @property
    def index(self):
        """The index of the shard being filled."""
        return len(self.progress.shards)

    def add(self, tokens, position, start=0):
        """Append tokens[start:] of the document at position = (document, file, row)."""
        size, pos, n = len(self.buf), start, len(tokens)
        while pos < n:
            take = min(size - self.fill, n - pos)
            self.buf[self.fill:self.fill + take] = tokens[pos:pos + take]
            self.fill, pos = self.fill + take, pos + take
            if self.fill == size:
                doc, file, row = position
                self.flush({"doc": doc, "file": file, "row": row, "skip_tokens": pos})

    def flush(self, next_start):
        """Write the filled part as the next shard, then record it with where the next one starts."""
        name = shard_name(self.prefix, self.index)
        save_file(self.out_dir / name, lambda path: write_shard(path, self.buf[:self.fill]))
        self.progress.shards.append({"name": name, "tokens": self.fill, "next": next_start})
        self.progress.save()
        self.fill = 0
        self.on_shard(self.progress.shards[-1])


# ------------------------------------------------------------------------------------------------
# The run


def default_out_dir(kind, version):
    """llm.c's folder names, under data/."""
    return REPO / "data" / f"{DATASETS[kind][2]}{version}"


def clear_output(out_dir, prefix):
    """Delete this prefix's shards, their .tmp files and the progress file (--restart)."""
    pattern = shard_pattern(prefix)
    for path in out_dir.iterdir():
        if pattern.match(path.name) or path.name in (f"{prefix}_progress.json", f"{prefix}_progress.json.tmp"):
            path.unlink()


def keep_good_shards(progress, out_dir):
    """Keep the recorded shards up to the first one missing or not of its recorded size."""
    for i, shard in enumerate(progress.shards):
        if not shard_ok(out_dir / shard["name"], shard["tokens"]):
            print(f"note: {out_dir / shard['name']}: missing or not of the recorded {shard['tokens']:,} tokens; "
                  f"writing again from shard {i}", file=sys.stderr)
            del progress.shards[i:]
            progress.complete = False
            return


def resume_point(progress):
    """((document, file, row), tokens of that document already written) where the next shard starts."""
    if not progress.shards:
        return (0, 0, 0), 0
    nxt = progress.shards[-1]["next"]
    if nxt is None:
        raise PrepError(f"{progress.path}: its last shard records no next position but the run is not complete; "
                        "--restart starts over")
    return (nxt["doc"], nxt["file"], nxt["row"]), nxt["skip_tokens"]


def check_continuation(out_dir, progress, tokens, skip, position, source_files):
    """The resumed document must be the one the last kept shard ends with: compare its first `skip`
    tokens with the end of that shard."""
    last = progress.shards[-1]
    m = min(skip, last["tokens"])
    tail = np.fromfile(out_dir / last["name"], dtype="<u2", offset=1024 + 2 * (last["tokens"] - m))
    if len(tokens) < skip or not np.array_equal(tail, tokens[skip - m:skip]):
        doc, file, row = position
        raise PrepError(f"{source_files[file]}: row {row} (document {doc}) does not continue {last['name']}: "
                        "the input is not the one the shards were made from; --restart starts over")


def make_source(args, recorded):
    """The input: local files (--input) or the Hub sample (recorded: the progress file's source)."""
    if args.input:
        return LocalSource(expand_inputs(args.input))
    repo, folder = DATASETS[args.type][0], VERSIONS[args.version]
    download_dir = args.download_dir or args.out_dir / "download"
    same = recorded if recorded and recorded.get("kind") == "hub" and recorded.get("repo") == repo \
        and recorded.get("folder") == folder else None
    return HubSource(repo, folder, download_dir, args.keep_downloads, same)


def describe(source):
    """One line naming a source identity."""
    if source.get("kind") == "hub":
        return f"{source['repo']} {source['folder']} at {source['revision'][:12]}, {len(source['files'])} files"
    return f"{len(source.get('files', []))} local files"


def run(args):
    """Prepare the shards; returns the exit status (errors raise PrepError)."""
    if not 1 <= args.shard_size < 2**31:
        raise PrepError(f"--shard-size: {args.shard_size} is not in 1..{2**31 - 1}")
    if args.workers < 1:
        raise PrepError(f"--workers: {args.workers} is not a positive number")
    prefix = DATASETS[args.type][1]
    args.out_dir = args.out_dir or default_out_dir(args.type, args.version)
    t0 = time.time()
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PrepError(f"{args.out_dir}: cannot create the folder ({e.strerror})") from None
    progress_path = args.out_dir / f"{prefix}_progress.json"
    if args.restart:
        clear_output(args.out_dir, prefix)
    progress = Progress.load(progress_path)
    pattern = shard_pattern(prefix)
    if progress is None and any(pattern.match(p.name) and not p.name.endswith(".tmp") for p in args.out_dir.iterdir()):
        raise PrepError(f"{args.out_dir}: holds {prefix}_*.bin shards but no {progress_path.name}, so where they "
                        "end is unknown; --restart rewrites them, or give another --out-dir")
    source = make_source(args, progress.source if progress else None)
    try:
        return prepare(args, prefix, progress, progress_path, source, t0)
    finally:
        source.close()


def import_tqdm():
    """tqdm, or PrepError naming the pip command."""
    try:
        from tqdm import tqdm
    except ImportError as e:
        raise PrepError(f"the progress bar needs tqdm ({e}): {sys.executable} -m pip install tqdm") from None
    return tqdm


def prepare(args, prefix, progress, progress_path, source, t0):
    """The body of run(): check the inputs and the resume point, then tokenize and write."""
    out_dir = args.out_dir
    if progress is None:
        progress = Progress(progress_path, source.identity(), args.shard_size)
    elif progress.source != source.identity() or progress.shard_size != args.shard_size:
        raise PrepError(f"{progress_path}: the shards there were made from {describe(progress.source)} with "
                        f"--shard-size {progress.shard_size}, not from {describe(source.identity())} with "
                        f"--shard-size {args.shard_size}; --restart starts over, or give another --out-dir")
    keep_good_shards(progress, out_dir)
    if progress.complete:
        t = progress.totals
        print(f"{out_dir}: complete, nothing to do: {len(progress.shards)} shards, {t.get('tokens', 0):,} tokens, "
              f"{t.get('documents', 0):,} documents (--restart makes them again)")
        return 0
    (doc0, file0, row0), skip = resume_point(progress)
    tqdm = import_tqdm()
    total = source.total_documents()  # local files: also opens every parquet footer (and reads jsonl) first
    for path in out_dir.iterdir():  # what a kill left mid-write
        ours = shard_pattern(prefix).match(path.name) or path.name == progress_path.name + ".tmp"
        if ours and path.name.endswith(".tmp"):
            path.unlink()
    enc = get_gpt2_encoding()  # the workers load it again, from the same files
    args.tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
    save_file(args.tokenizer_out, lambda path: write_tokenizer(path, enc))
    if progress.shards:
        print(f"resuming: {len(progress.shards)} finished shards kept in {out_dir}; going on at document "
              f"{doc0:,} (file {file0}, row {row0}; {skip:,} of its tokens are in the last shard)")
    progress.save()
    print(f"source: {describe(progress.source)}; {args.workers} tokenizer processes; shards of "
          f"{args.shard_size:,} tokens into {out_dir}")
    try:
        docs, tokens = tokenize_into_shards(args, prefix, progress, source, (doc0, file0, row0), skip, total, tqdm)
    except PrepError as e:
        n = len(progress.shards)
        raise PrepError(f"{e}; {n} finished shard{'s' * (n != 1)} in {out_dir} kept: the same command continues "
                        "after the last of them") from None
    n = len(progress.shards)
    print(f"done: {docs:,} documents, {tokens:,} tokens in {n} shards (1 val + {n - 1} train) in {out_dir}, "
          f"{time.time() - t0:.1f} s")
    if n == 1:
        print("warning: everything went into the validation shard, there is no training shard "
              "(a smaller --shard-size makes some)", file=sys.stderr)
    return 0


def tokenize_into_shards(args, prefix, progress, source, start, skip, total, tqdm):
    """Tokenize the documents from start = (document, file, row) on (the first `skip` tokens of that
    document are in the last kept shard) in a process pool and write the shards; mark the progress
    file complete at the end. Returns (documents, tokens) of the whole run, earlier runs included."""
    out_dir, files = args.out_dir, progress.source["files"]
    doc0, file0, row0 = start
    bar = tqdm(total=total, initial=doc0, unit=" docs", unit_scale=True, dynamic_ncols=True, smoothing=0.05,
               disable=None, file=sys.stderr)

    def on_shard(shard):
        """A shard is finished: say so, and let the source drop the downloads it no longer needs."""
        bar.write(f"wrote {shard['name']}: {shard['tokens']:,} tokens")
        if shard["next"] is not None:
            source.passed(shard["next"]["file"])

    writer = ShardWriter(out_dir, prefix, progress, on_shard)
    state = {"tokens": sum(s["tokens"] for s in progress.shards), "docs": doc0, "first": bool(progress.shards)}

    def consume(positions, result):
        """Hand one tokenized batch, in input order, to the shard writer."""
        lengths, flat = result.get()
        ends = np.cumsum(lengths)
        for (doc, file, row), end, n in zip(positions, ends, lengths):
            tokens, begin = flat[end - n:end], 0
            if state["first"]:  # the document the last kept shard ends in
                state["first"] = False
                if (file, row) != (file0, row0):
                    raise PrepError(f"{files[file0]}: has no row {row0} (document {doc0:,}): the input is not the "
                                    "one the shards were made from; --restart starts over")
                check_continuation(out_dir, progress, tokens, skip, (doc, file, row), files)
                begin = skip
            writer.add(tokens, (doc, file, row), begin)
            state["tokens"] += int(n) - begin
        state["docs"] += len(positions)
        bar.update(len(positions))
        bar.set_postfix_str(f"{state['tokens'] / 1e6:,.1f}M tokens, shard {writer.index}", refresh=False)

    def numbered():
        """(document number, file, row, text) from the resume point on."""
        for doc, (file, row, text) in enumerate(source.documents((file0, row0)), doc0):
            yield doc, file, row, text

    pending = deque()
    try:
        with Pool(args.workers, initializer=init_worker) as pool:
            for batch in batched(numbered(), BATCH_DOCS):
                texts = [b[3] for b in batch]
                pending.append(([b[:3] for b in batch], pool.apply_async(tokenize_texts, (texts,))))
                while len(pending) >= TASKS_PER_WORKER * args.workers:
                    consume(*pending.popleft())
            while pending:
                consume(*pending.popleft())
    finally:
        bar.close()
    if state["first"]:
        where = f"{files[file0]} row {row0}" if file0 < len(files) else "past the last file"
        raise PrepError(f"the input ended before document {doc0:,} ({where}): it is not the one the shards were "
                        "made from; --restart starts over")
    if writer.fill:
        writer.flush(None)
    elif progress.shards:
        progress.shards[-1]["next"] = None  # the input ended exactly at a shard boundary
    if not progress.shards:
        raise PrepError("the input holds no documents")
    progress.complete = True
    progress.totals = {"documents": state["docs"], "tokens": state["tokens"]}
    progress.save()
    source.passed(len(files))
    for path in out_dir.iterdir():  # shards of an earlier, longer run
        m = shard_pattern(prefix).match(path.name)
        if m and int(m.group(1)) >= len(progress.shards):
            print(f"removing stale {path}")
            path.unlink()
    return state["docs"], state["tokens"]


def main(argv=None):
    """Run the preparation: exit status 0, 1 on an error, 130 on Ctrl-C."""
    args = parse_args(argv)
    try:
        return run(args)
    except PrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: finished shards are kept; the same command continues after the last of them",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
