"""Write the HellaSwag validation set as an llm.c eval file, the file the trainers' -h 1 -hf reads.

Input: HellaSwag's JSON lines, one example per line with at least
  "ctx" (the context, a non-empty string), "endings" (4 strings) and "label" (the index of the
  right ending, 0..3; an integer, or a string of one digit as some copies have it).
Other keys (ind, activity_label, ctx_a, ctx_b, split, source_id, ...) are ignored; blank lines are
skipped. Online (no --input) the validation file is downloaded from its public source,
  https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl
into --download-dir (kept there and used again, offline too); offline give --input FILE.jsonl.

Tokens (llm.c's dev/data/hellaswag.py rendering, tiktoken's gpt2 encoding): the context is
encode(ctx) and each ending encode(" " + ending), so that the ending's first word gets its
leading space as it would in running text (encode_ordinary: text that looks like a special token
is ordinary text).

Output (llm.c's eval format, magic 20240522, version 1; hellaswag.h reads it): 256 int32 header
words {20240522, 1, number of examples N, bytes of the longest example}, then per example a
stream of uint16: 65535, the example's length in bytes (these words included), its index,
the label, 4 (completions), the context length and tokens, then per ending its length and tokens.
Written to OUT.tmp and renamed. The default --out is where the trainers' -hf looks when not given
(dev/data/hellaswag/hellaswag_val.bin from the repository root, llm.c's location).

Errors (one `error: ...` line, exit status 1, nothing written): a failed download (names the URL;
offline, give --input), a missing or unreadable input, and every malformed row, as
`error: FILE:LINE: <what is wrong>`: not valid JSON, not an object, a missing key, an empty or
non-string context, not 4 endings or a non-string ending, a label that is not 0..3, an example
longer than the format's 16-bit length field, more examples than its 16-bit index.
"""
import argparse
import http.client
import json
import sys
from pathlib import Path

import numpy as np

from data_common import REPO, atomic_write, fetch_url, get_gpt2_encoding

URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
DEFAULT_OUT = REPO / "dev" / "data" / "hellaswag" / "hellaswag_val.bin"  # = -hf's default (train_config.h)
DEFAULT_DOWNLOAD_DIR = REPO / "data" / "hellaswag"
EVAL_MAGIC, EVAL_VERSION = 20240522, 1
COMPLETIONS = 4
START = 65535           # example start delimiter
MAX_EXAMPLES = 65536    # the index is a uint16 (hellaswag.h accepts 1..65536)
MAX_EXAMPLE_BYTES = 65534  # the length field is a uint16 and even


class PrepError(Exception):
    """A problem that stops the preparation; printed as `error: <message>`."""


def parse_args(argv=None):
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, help="local HellaSwag .jsonl file (default: download the validation set)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="eval file to write (default: %(default)s, the trainers' -hf default)")
    p.add_argument("--download-dir", type=Path, default=DEFAULT_DOWNLOAD_DIR,
                   help="where the downloaded hellaswag_val.jsonl is kept (default: %(default)s)")
    return p.parse_args(argv)


def parse_label(where, value):
    """The label as an int 0..3 (an int, or a one-digit string); PrepError naming where otherwise."""
    if isinstance(value, str) and value.isdigit() and len(value) == 1:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < COMPLETIONS:
        raise PrepError(f"{where}: label: {json.dumps(value)} is not one of 0, 1, 2, 3")
    return value


def parse_row(where, line):
    """(label, ctx, endings) of one JSON line; PrepError naming where (FILE:LINE) otherwise."""
    try:
        row = json.loads(line)
    except UnicodeDecodeError as e:
        raise PrepError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise PrepError(f"{where}: not valid JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(row, dict):
        raise PrepError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("ctx", "endings", "label"):
        if key not in row:
            raise PrepError(f"{where}: missing key '{key}' (keys: {', '.join(row) or 'none'})")
    ctx, endings = row["ctx"], row["endings"]
    if not isinstance(ctx, str) or not ctx:
        raise PrepError(f"{where}: ctx: expected a non-empty string, got {json.dumps(ctx)[:60]}")
    if not isinstance(endings, list) or len(endings) != COMPLETIONS:
        got = f"{len(endings)} endings" if isinstance(endings, list) else type(endings).__name__
        raise PrepError(f"{where}: endings: expected a list of {COMPLETIONS} strings, got {got}")
    for i, ending in enumerate(endings):
        if not isinstance(ending, str):
            raise PrepError(f"{where}: endings[{i}]: expected a string, got {type(ending).__name__}")
    return parse_label(where, row["label"]), ctx, endings


def load_examples(path):
    """[(line number, label, ctx, endings)] of a HellaSwag jsonl file; PrepError naming FILE:LINE for
    a bad row."""
    examples = []
    try:
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    examples.append((lineno, *parse_row(f"{path}:{lineno}", line)))
                    if len(examples) > MAX_EXAMPLES:
                        raise PrepError(f"{path}:{lineno}: more than {MAX_EXAMPLES} examples (the format's index "
                                        "is 16-bit)")
    except OSError as e:
        raise PrepError(f"{path}: cannot read ({e.strerror or e})") from None
    if not examples:
        raise PrepError(f"{path}: no examples")
    return examples


def render(enc, ctx, endings):
    """(context tokens, [ending tokens]) as llm.c renders an example: encode(ctx), encode(" " + ending)."""
    return enc.encode_ordinary(ctx), [enc.encode_ordinary(" " + ending) for ending in endings]


def example_words(index, label, ctx_tokens, ending_tokens):
    """The uint16 words of one example in the eval format (its length field filled in)."""
    words = [START, 0, index, label, len(ending_tokens), len(ctx_tokens), *ctx_tokens]
    for tokens in ending_tokens:
        words += [len(tokens), *tokens]
    words[1] = 2 * len(words)
    return words


def write_evalfile(path, rendered):
    """Write the eval file; rendered is [(where, label, ctx_tokens, [ending tokens])], where naming the
    example's source for errors. Returns (examples, longest example in bytes)."""
    stream, longest = [], 0
    for i, (where, label, ctx_tokens, ending_tokens) in enumerate(rendered):
        words = example_words(i, label, ctx_tokens, ending_tokens)
        if words[1] > MAX_EXAMPLE_BYTES:
            raise PrepError(f"{where}: the example takes {words[1]} bytes, more than the format's 16-bit length "
                            f"field holds ({MAX_EXAMPLE_BYTES})")
        longest = max(longest, words[1])
        stream += words
    header = np.zeros(256, dtype="<i4")
    header[:4] = EVAL_MAGIC, EVAL_VERSION, len(rendered), longest
    try:
        atomic_write(path, [header.tobytes(), np.array(stream, dtype="<u2").tobytes()])
    except OSError as e:
        Path(str(path) + ".tmp").unlink(missing_ok=True)
        raise PrepError(f"{path}: cannot write ({e.strerror or e})") from None
    return len(rendered), longest


def resolve_input(args):
    """--input, else the downloaded copy in --download-dir (downloaded first if missing)."""
    if args.input:
        if not args.input.is_file():
            raise PrepError(f"{args.input}: no such file")
        return args.input
    path = args.download_dir / "hellaswag_val.jsonl"
    if not path.is_file():
        print(f"downloading {URL} -> {path}")
        try:
            fetch_url(URL, path)
        except (OSError, http.client.HTTPException) as e:  # URLError, socket errors, a cut connection
            raise PrepError(f"{URL}: download failed ({getattr(e, 'reason', e)}); without internet, give --input "
                            "with a local copy of hellaswag_val.jsonl") from None
    return path


def main(argv=None):
    """Run the conversion; exit status 0, or 1 after an `error:` line."""
    args = parse_args(argv)
    try:
        src = resolve_input(args)
        examples = load_examples(src)
        enc = get_gpt2_encoding()
        rendered = []
        for lineno, label, ctx, endings in examples:
            ctx_tokens, ending_tokens = render(enc, ctx, endings)
            rendered.append((f"{src}:{lineno}", label, ctx_tokens, ending_tokens))
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PrepError(f"{args.out.parent}: cannot create the folder ({e.strerror or e})") from None
        n, longest = write_evalfile(args.out, rendered)
    except PrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    longest_tokens = max(len(r[2]) + max(map(len, r[3])) for r in rendered)
    labels = np.bincount([r[1] for r in rendered], minlength=COMPLETIONS)
    print(f"input {src}: {n:,} examples (labels 0-3: {', '.join(map(str, labels))})")
    print(f"wrote {args.out}: longest example {longest} bytes; longest context + ending {longest_tokens} tokens "
          f"(the run's -t must be at least that)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
