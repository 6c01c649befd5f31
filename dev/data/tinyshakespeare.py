"""Tokenize Tiny Shakespeare with GPT-2 BPE into llm.c token shards.

Writes tiny_shakespeare_val.bin (first 32,768 tokens), tiny_shakespeare_train.bin (the rest)
and the GPT-2 tokenizer file. Every blank-line-separated section is preceded by <|endoftext|>.
"""
import argparse
import sys
import time
from pathlib import Path

from data_common import (REPO, fetch_url, file_sha256, get_gpt2_encoding, newer_than,
                         shared_data_dir, shared_sha256, write_shard, write_tokenizer)

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
CANONICAL_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
VAL_TOKENS = 32768
EXPECTED = (32768, 305260)  # (val, train) for the canonical input


def parse_args(argv=None):
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, help="input text (default: shared copy, else download)")
    p.add_argument("--out-dir", type=Path, default=REPO / "data" / "tinyshakespeare",
                   help="folder for the two shards (default: %(default)s)")
    p.add_argument("--tokenizer-out", type=Path, default=REPO / "data" / "gpt2_tokenizer.bin",
                   help="tokenizer file to write (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rewrite outputs even if up to date")
    return p.parse_args(argv)


def resolve_input(args):
    """Return the input path: --input, else the shared copy, else a download into the out dir."""
    if args.input:
        return args.input
    shared = shared_data_dir()
    if shared and (shared / "tinyshakespeare" / "input.txt").is_file():
        return shared / "tinyshakespeare" / "input.txt"
    path = args.out_dir / "input.txt"
    if not path.is_file():
        print(f"downloading {URL} -> {path}")
        fetch_url(URL, path)
    return path


def tokenize(text, enc):
    """Tokenize llm.c's way: <|endoftext|> before every "\\n\\n"-separated section."""
    marked = "<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>")
    return enc.encode(marked, allowed_special={"<|endoftext|>"})


def main(argv=None):
    """Run the preparation and print what was written."""
    args = parse_args(argv)
    t0 = time.time()
    try:
        src = resolve_input(args)
    except OSError as e:  # offline without the shared copy
        print(f"error: {URL}: download failed ({e}); without internet, point LLMC_SHARED_DATA at the "
              "shared data folder (tinyshakespeare/input.txt, gpt2/) or give --input", file=sys.stderr)
        return 1
    val_path = args.out_dir / "tiny_shakespeare_val.bin"
    train_path = args.out_dir / "tiny_shakespeare_train.bin"
    outputs = [val_path, train_path, args.tokenizer_out]
    if not args.force and newer_than(outputs, src):
        print(f"up to date, skipping (use --force to rewrite): {', '.join(map(str, outputs))}")
        return 0
    enc = get_gpt2_encoding()
    tokens = tokenize(Path(src).read_text(encoding="utf-8"), enc)
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    if file_sha256(src) == (shared_sha256("tinyshakespeare/input.txt") or CANONICAL_SHA256):
        if (len(val), len(train)) != EXPECTED:
            print(f"error: {src}: canonical input gave {len(val)} + {len(train)} tokens, expected {EXPECTED}",
                  file=sys.stderr)
            return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_shard(val_path, val)
        write_shard(train_path, train)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    write_tokenizer(args.tokenizer_out, enc)
    print(f"input {src}: {len(tokens):,} tokens")
    print(f"wrote {val_path}: {len(val):,} tokens")
    print(f"wrote {train_path}: {len(train):,} tokens")
    print(f"wrote {args.tokenizer_out}: {enc.n_vocab} tokens")
    print(f"done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
