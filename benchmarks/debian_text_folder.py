"""A folder of real documents nobody here wrote, gathered from this machine's /usr/share/doc.

The text family's end-to-end runs need a folder of ~500 documents and ~250k words as users have
them: READMEs, NEWS files, Markdown, reStructuredText, HTML, gzipped changelogs, mixed
lengths. This copies such files as they are (compressed ones stay compressed, the format is
the file's own) until the word budget is spent, smallest formats first so that many packages
are represented, and leaves out copyright files (one license text repeated hundreds of
times), exact duplicates (the same changelog under several package names) and binary files.

    python benchmarks/debian_text_folder.py /tmp/debian-docs --documents 500 --words 250000
    python -m pipeline run --family seq2seq --data /tmp/debian-docs --output /tmp/run-debian-docs
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import lzma
import os
import random
import shutil
import sys

SOURCE = "/usr/share/doc"
SUFFIXES = (".txt", ".md", ".rst", ".html", ".htm")
COMPRESSED = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}
MAX_DOCUMENT_WORDS = 2000  # a few huge changelogs would otherwise be the whole folder


def _text_of(path: str) -> bytes | None:
    """The file's decompressed bytes, or None when it is not a text document worth taking."""
    name = os.path.basename(path)
    base, compression = os.path.splitext(name)
    if compression not in COMPRESSED:
        base, compression = name, ""
    if "copyright" in name or not (base.endswith(SUFFIXES) or base.startswith(("README", "NEWS", "changelog"))):
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        data = COMPRESSED[compression](data) if compression else data
    except (OSError, EOFError, lzma.LZMAError, ValueError):
        return None
    return None if b"\0" in data[:4096] else data


def gather(target: str, documents: int, words: int, seed: int = 0,
           max_document_words: int = MAX_DOCUMENT_WORDS) -> tuple[int, int]:
    """Copy up to ``documents`` files (about ``words`` words in all) into ``target``; (files, words)."""
    candidates = []
    for root, dirs, files in os.walk(SOURCE):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            data = _text_of(path)
            if data is not None:
                candidates.append((path, len(data.split()), hashlib.sha256(data).hexdigest()))
    random.Random(seed).shuffle(candidates)
    os.makedirs(target, exist_ok=True)
    taken = total = 0
    seen: set[str] = set()
    for path, count, digest in candidates:
        if digest in seen or count > max_document_words or total + count > words:
            continue
        seen.add(digest)
        relative = os.path.relpath(path, SOURCE)
        destination = os.path.join(target, relative)
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copyfile(path, destination)
        taken, total = taken + 1, total + count
        if taken >= documents:
            break
    return taken, total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--words", type=int, default=250_000)
    parser.add_argument("--max-document-words", type=int, default=MAX_DOCUMENT_WORDS,
                        help="leave out longer documents (default: %(default)s); raise it to gather 1M+ words")
    args = parser.parse_args(argv)
    if os.path.exists(args.target) and os.listdir(args.target):
        print(f"{args.target} is not empty; give a new folder", file=sys.stderr)
        return 2
    taken, total = gather(args.target, args.documents, args.words, max_document_words=args.max_document_words)
    print(f"{taken} documents, {total:,} words (whitespace-separated, before markup is dropped) in {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
