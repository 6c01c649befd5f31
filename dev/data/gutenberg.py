"""Tokenize the Project Gutenberg book collection with GPT-2 BPE into llm.c token shards.

Reads gutenberg_en_{train,val}.txt.gz and manifest.json (default: the shared data folder).
Every book is one document, preceded by <|endoftext|>; books keep manifest order. Writes
gutenberg_{train,val}_NNNNNN.bin of at most --shard-size tokens (documents may straddle shards).
With --download, the books are fetched from gutenberg.org and cleaned first (needs internet).
"""
import argparse
import gzip
import json
import os
import re
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from data_common import EOT, REPO, fetch_url, get_gpt2_encoding, shared_data_dir, write_shard, write_tokenizer

SEPARATOR = b"\n\n\n\n"  # between books in a split file; the file ends with one "\n"
BOOK_URL = "https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt"
# the shared collection's books (Gutenberg ids, manifest order), for --download
BOOK_IDS = (
    11, 1155, 1184, 120, 1237, 140, 145, 158, 16, 1952, 203, 205, 219, 244, 25344, 2591, 2600,
    2701, 27942, 28054, 2852, 308, 3176, 35, 36, 41, 43, 4300, 46, 56817, 58585, 58866, 60364,
    60378, 60392, 6688, 74, 76, 766, 829, 863, 940, 98, 1399, 45, 99, 8176, 1301, 60271, 1400,
    11027, 19068, 1322, 8164, 1342, 38716, 132, 50133, 39827, 13423, 10554, 1080, 11030, 1232,
    1250, 1251, 1254, 1260, 128, 13583, 13660, 1497, 161, 174, 20203, 2298, 23, 2500, 2542,
    28860, 3207, 345, 3567, 38811, 39944, 408, 435, 4363, 44414, 4657, 4658, 48731, 5200, 55,
    55539, 59254, 60362, 60367, 60372, 60374, 6130, 7256, 7370, 768, 815, 844, 851, 108, 11703,
    1661, 42078, 521, 834,
)
VAL_IDS = frozenset({205, 35, 98, 174, 345})  # Walden, Time Machine, Two Cities, Dorian Gray, Dracula
START_RE = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG")
END_RE = re.compile(r"^\*\*\*\s*END OF")

_ENC = None  # per-worker encoding


def parse_args(argv=None):
    """Parse the command line."""
    shared = shared_data_dir()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input-dir", type=Path, default=shared / "gutenberg" if shared else None,
                   help="folder with gutenberg_en_{train,val}.txt.gz and manifest.json (default: %(default)s)")
    p.add_argument("--out-dir", type=Path, default=REPO / "data" / "gutenberg",
                   help="folder for the shards (default: %(default)s)")
    p.add_argument("--shard-size", type=int, default=10_000_000, help="max tokens per shard (default: %(default)s)")
    p.add_argument("--max-books", type=int, help="only the first N books of the manifest (quick tests)")
    p.add_argument("--tokenizer-out", type=Path, default=REPO / "data" / "gpt2_tokenizer.bin",
                   help="tokenizer file to write (default: %(default)s)")
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="tokenizer processes (default: %(default)s)")
    p.add_argument("--download", action="store_true",
                   help="fetch and clean the books from gutenberg.org into OUT_DIR/source first")
    return p.parse_args(argv)


def clean_gutenberg(raw):
    """Cut a raw Gutenberg text to the lines between START and END markers, normalizing whitespace."""
    lines = raw.replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if START_RE.match(line)), None)
    if start is None:
        raise ValueError("no '*** START OF THE/THIS PROJECT GUTENBERG' marker")
    end = next((i for i in range(start + 1, len(lines)) if END_RE.match(lines[i])), len(lines))
    text = "\n".join(line.rstrip(" \t") for line in lines[start + 1:end])
    return re.sub(r"\n{4,}", "\n\n\n", text).strip("\n")


def download_books(dest, ids=BOOK_IDS, val_ids=VAL_IDS, delay=1.0):
    """Fetch and clean the books into dest in the shared layout (split .txt.gz files + manifest.json)."""
    raw_dir = dest / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    parts, entries = {"train": [], "val": []}, []
    offsets = {"train": 0, "val": 0}
    for pg_id in ids:
        raw_path = raw_dir / f"pg{pg_id}.txt"
        try:
            if not raw_path.is_file():
                fetch_url(BOOK_URL.format(id=pg_id), raw_path)
                time.sleep(delay)
            text = clean_gutenberg(raw_path.read_bytes().decode("utf-8-sig")).encode("utf-8")
        except (OSError, ValueError) as e:
            print(f"warning: book {pg_id} skipped: {e}", file=sys.stderr)
            continue
        split = "val" if pg_id in val_ids else "train"
        entries.append({"split": split, "pg_id": pg_id, "offset": offsets[split], "clean_bytes": len(text)})
        parts[split].append(text)
        offsets[split] += len(text) + len(SEPARATOR)
    for split, texts in parts.items():
        with gzip.open(dest / f"gutenberg_en_{split}.txt.gz", "wb") as f:
            f.write(SEPARATOR.join(texts) + b"\n")
    (dest / "manifest.json").write_text(json.dumps({"books": entries}, indent=1))
    return dest


def load_books(input_dir, max_books=None):
    """Return [(split, text)] for the manifest's books in manifest order (first max_books only)."""
    manifest = json.loads((input_dir / "manifest.json").read_text())
    books = manifest["books"][:max_books]
    texts = {}
    for split in sorted({b["split"] for b in books}):
        data = gzip.open(input_dir / f"gutenberg_en_{split}.txt.gz").read()
        entries = [b for b in manifest["books"] if b["split"] == split]
        ends = [b["offset"] - len(SEPARATOR) for b in entries[1:]] + [len(data) - 1]
        for b, end in zip(entries, ends):
            if "clean_bytes" in b and b["offset"] + b["clean_bytes"] != end:
                raise ValueError(f"{input_dir}: manifest: book {b['pg_id']} offsets disagree with clean_bytes")
            if data[end:end + len(SEPARATOR)] not in (SEPARATOR, b"\n"):
                raise ValueError(f"{input_dir}: manifest: no book separator after book {b['pg_id']}")
            texts[b["pg_id"], split] = data[b["offset"]:end].decode("utf-8")
    return [(b["split"], texts[b["pg_id"], b["split"]]) for b in books]


def init_worker():
    """Load the encoding once per worker process."""
    global _ENC
    _ENC = get_gpt2_encoding()


def encode_doc(text):
    """Tokenize one book as a document: <|endoftext|> then its ordinary tokens."""
    return np.array([EOT] + _ENC.encode_ordinary(text), dtype=np.uint16)


def write_split(docs, out_dir, split, shard_size):
    """Pack token documents into consecutive shards; return (tokens, shards written)."""
    buf, fill, n_shards, total = np.empty(shard_size, dtype=np.uint16), 0, 0, 0
    for doc in docs:
        pos = 0
        while pos < len(doc):
            take = min(shard_size - fill, len(doc) - pos)
            buf[fill:fill + take] = doc[pos:pos + take]
            fill, pos, total = fill + take, pos + take, total + take
            if fill == shard_size:
                write_shard(out_dir / f"gutenberg_{split}_{n_shards:06d}.bin", buf)
                fill, n_shards = 0, n_shards + 1
    if fill:
        write_shard(out_dir / f"gutenberg_{split}_{n_shards:06d}.bin", buf[:fill])
        n_shards += 1
    for stale in out_dir.glob(f"gutenberg_{split}_*.bin"):
        if int(stale.stem.rsplit("_", 1)[1]) >= n_shards:
            print(f"removing stale {stale}")
            stale.unlink()
    return total, n_shards


def main(argv=None):
    """Run the preparation and print totals."""
    args = parse_args(argv)
    if args.shard_size < 1 or (args.max_books is not None and args.max_books < 1):
        print("error: --shard-size and --max-books must be positive", file=sys.stderr)
        return 1
    t0 = time.time()
    input_dir = download_books(args.out_dir / "source") if args.download else args.input_dir
    if input_dir is None or not (input_dir / "manifest.json").is_file():
        print(f"error: {input_dir}: manifest.json not found (give --input-dir, or --download)", file=sys.stderr)
        return 1
    try:
        books = load_books(input_dir, args.max_books)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    enc = get_gpt2_encoding()  # each worker loads it again (init_worker), from the same files
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
    write_tokenizer(args.tokenizer_out, enc)
    print(f"wrote {args.tokenizer_out}")
    with Pool(args.workers, initializer=init_worker) as pool:
        for split in ("train", "val"):
            docs = [text for s, text in books if s == split]
            tokens, shards = write_split(pool.imap(encode_doc, docs), args.out_dir, split, args.shard_size)
            print(f"{split}: {len(docs)} books, {tokens:,} tokens, {shards} shards in {args.out_dir}")
    print(f"done: {len(books)} books in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
