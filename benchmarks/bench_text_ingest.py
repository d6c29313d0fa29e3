"""Reading a large text folder: the project's reader vs plain Python reading the same bytes.

The corpus is generated once (real prose: CPython's pydoc topics, cut into documents of a
few hundred to a few thousand words) in the formats a documentation folder holds: ``.txt``,
``.md`` (headings, links, code fences), ``.rst`` (roles, literal blocks), ``.html``, and
``.gz`` / ``.bz2`` / ``.xz`` forms of them, in nested folders.

Variants, interleaved in rounds (``_common.interleave``), medians and ratios:

- ``plain``: ``os.walk``, ``open().read()``, the stdlib decompressor by suffix,
  ``.decode("utf-8")``, ``.split()``: the least any reader must do to get the words;
- ``reader``: ``data.text_files.list_text_files`` + ``data.text_sources.read_document`` per file,
  what both the prepare step and the ExampleGen's Beam workers run (safe listing with
  ``os.stat``, encoding rules, markup extraction, the short/empty checks);
- ``--example-gen``: additionally the real TextExampleGen executor (Beam in_memory, in a child
  process) once over the same folder, windows written as GZIP TFRecords: the whole ingestion.

Every variant must find the same documents (the reader skips none of the generated files).

    python benchmarks/bench_text_ingest.py                  # ~2,000 documents, ~20 MB of text
    python benchmarks/bench_text_ingest.py --documents 10000 --example-gen
    python benchmarks/bench_text_ingest.py --words 10000000 --rounds 2 --example-gen   # the 10M-word folder
    python benchmarks/bench_text_ingest.py --quick          # smoke only
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_text_ingest"
FORMATS = (".txt", ".txt", ".md", ".md", ".rst", ".html", ".txt.gz", ".md.gz", ".txt.bz2", ".rst.xz")
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
DECOMPRESS = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--words", type=int, default=None,
                   help="generate documents until this many words instead (overrides --documents)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--example-gen", action="store_true", help="also time the TextExampleGen executor once")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/text-ingest")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _markup(words: list[str], suffix: str) -> str:
    """The words as a document in the format of ``suffix`` (with the markup such files carry)."""
    lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    if suffix.startswith(".md"):
        out = [f"# {lines[0]}", ""]
        for i, line in enumerate(lines[1:]):
            out.append(f"Some *{line}* with a [link](https://example.org/{i}) and `code`." if i % 7 == 0 else line)
            if i % 25 == 24:
                out += ["", "```python", "print('dropped')", "```", ""]
        return "\n".join(out)
    if suffix.startswith(".rst"):
        out = [lines[0], "=" * len(lines[0]), ""]
        for i, line in enumerate(lines[1:]):
            out.append(f"{line} :func:`name` and ``literal``" if i % 7 == 0 else line)
            if i % 25 == 24:
                out += ["", "Example::", "", "    dropped()", ""]
        return "\n".join(out)
    if suffix.startswith(".html"):
        body = "".join(f"<p>{line} <a href='#{i}'>link</a></p>" for i, line in enumerate(lines))
        return f"<html><head><title>{lines[0]}</title><style>p{{}}</style></head><body>{body}</body></html>"
    return "\n".join(lines)


def generate(folder: Path, documents: int, words_wanted: int | None = None) -> int:
    """Write the corpus (``documents`` files, or as many as make ``words_wanted`` words); how many files."""
    marker = folder / f".complete-{documents if words_wanted is None else f'{words_wanted}-words'}"
    if marker.exists():
        return int(marker.read_text() or documents)
    from pydoc_data.topics import topics

    words = " ".join(topics[name] for name in sorted(topics)).split()
    rng = random.Random(0)
    written = 0
    for i in range(documents if words_wanted is None else 10**9):
        if words_wanted is not None and written >= words_wanted:
            documents = i
            break
        size = rng.randint(300, 3000)
        written += size
        start = rng.randrange(0, len(words) - size)
        suffix = FORMATS[i % len(FORMATS)]
        text = _markup(words[start:start + size], suffix).encode("utf-8")
        compression = next((c for c in COMPRESS if suffix.endswith(c)), "")
        data = COMPRESS[compression](text) if compression else text
        path = folder / f"part-{i % 20:02d}" / f"doc-{i:06d}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    marker.write_text(str(documents))
    return documents


def plain(folder: Path) -> tuple[int, int]:
    """(documents, words) the minimal way; no markup handling, no checks."""
    documents = words = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            with open(os.path.join(dirpath, name), "rb") as handle:
                data = handle.read()
            compression = os.path.splitext(name)[1]
            if compression in DECOMPRESS:
                data = DECOMPRESS[compression](data)
            words += len(data.decode("utf-8").split())
            documents += 1
    return documents, words


def reader(folder: Path) -> tuple[int, int, int]:
    """(documents, words, skipped) through the project's reader."""
    from data.text_corpus import Skip
    from data.text_files import list_text_files
    from data.text_sources import read_document

    files, skipped = list_text_files(str(folder), is_folder=True)
    documents = words = 0
    for file in files:
        read = read_document(file.relative, file.uri, 20)
        if isinstance(read, Skip):
            skipped.append(read)
        else:
            documents += 1
            words += len(read[0].words)
    return documents, words, len(skipped)


def example_gen(folder: Path, out: Path) -> dict:
    """The real executor once, in a child process (Beam in_memory): seconds and windows written."""
    cmd = [sys.executable, __file__, "--child", str(folder), "--work-dir", str(out)]
    started = time.monotonic()
    process = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=3600)
    seconds = time.monotonic() - started
    written = json.loads(process.stdout.strip().splitlines()[-1]) if process.returncode == 0 else {}
    return {"seconds": seconds, "returncode": process.returncode, **written}


def child(folder: str, out: str) -> dict:
    import stackenv  # noqa: F401

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
    from example_gen_helpers import recorded_facts, run_example_gen
    from tfx.proto import example_gen_pb2

    from components.ingest_config import WHOLE_FOLDER
    from components.text_example_gen import TextExampleGenExecutor, input_config

    subprocess.run(["rm", "-rf", out], check=True)
    splits = run_example_gen(TextExampleGenExecutor, folder, Path(out), output_config=example_gen_pb2.Output(),
                             input_config=input_config(WHOLE_FOLDER))
    corpus = recorded_facts(Path(out))["corpus"]
    return {"windows": sum(len(r) for r in splits.values()), "documents": corpus["documents"],
            "words": corpus["words"]}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.work_dir)))
        return 0
    documents = 60 if args.quick else args.documents
    rounds = 1 if args.quick else args.rounds
    work = Path(args.work_dir)
    words_wanted = None if args.quick else args.words
    folder = work / (f"corpus-{documents}" if words_wanted is None else f"corpus-{words_wanted}-words")
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    C.log(f"generating {f'{words_wanted:,} words of' if words_wanted else documents} documents in {folder}")
    documents = generate(folder, documents, words_wanted)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    found: dict[str, tuple] = {}
    import data.text_sources  # noqa: F401 - imports (TensorFlow comes with data/) stay out of the timings

    def run(name, fn):
        def call():
            found[name] = fn(folder)
        return call

    samples = C.interleave({"plain": run("plain", plain), "reader": run("reader", reader)}, rounds=rounds,
                           warmup=0 if args.quick else 1)
    plain_docs, plain_words = found["plain"]
    reader_docs, reader_words, skipped = found["reader"]
    ok = plain_docs == reader_docs == documents and skipped == 0
    ratio = C.ratio(C.median(samples["reader"]), C.median(samples["plain"]))
    paired = C.paired_ratio(samples["reader"], samples["plain"])
    rows = [["plain Python", plain_docs, plain_words, C.fmt(C.median(samples["plain"])), "1"],
            ["reader (data.text_files)", reader_docs, reader_words, C.fmt(C.median(samples["reader"])),
             f"{C.fmt(ratio)} (paired {C.fmt(paired)})"]]
    result = {"documents": documents, "bytes_on_disk": size, "rounds": rounds, "samples_s": samples,
              "plain": {"documents": plain_docs, "words": plain_words},
              "reader": {"documents": reader_docs, "words": reader_words, "skipped": skipped},
              "reader_vs_plain": ratio, "reader_vs_plain_paired": paired, "same_documents": ok}
    if args.example_gen:
        C.log("TextExampleGen executor (Beam in_memory) once ...")
        gen = example_gen(folder, work / "example-gen")
        result["example_gen"] = gen
        result["example_gen_vs_plain"] = C.ratio(gen["seconds"], C.median(samples["plain"]))
        ok = ok and gen.get("documents") == documents
        rows.append(["TextExampleGen (whole ingestion, once)", gen.get("documents"), gen.get("words"),
                     C.fmt(gen["seconds"]), C.fmt(result["example_gen_vs_plain"])])
    C.print_table(["variant", "documents", "words", "median s", "ratio to plain"], rows,
                  title=f"Reading {documents} documents ({size / 2**20:.1f} MiB on disk), {rounds} interleaved rounds")
    if not ok:
        print(f"MISMATCH: generated {documents}, plain read {plain_docs}, reader read {reader_docs} "
              f"(skipped {skipped})")
    C.write_json(NAME, result, args, machine)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
