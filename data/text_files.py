"""Which files of a text folder are documents, and the words of one document.

Shared by the prepare step (``data.text_sources``) and the ExampleGen's Beam units
(``data.text_ingest``), so both read the same files into the same words.

The format is decided by the name, after removing a compression suffix (``.gz``,
``.bz2``, ``.xz``; ``data.text_decode``):

* ``.txt`` / ``.text``: plain text;
* ``.md`` / ``.markdown``, ``.rst`` / ``.rest``, ``.html`` / ``.htm`` / ``.xhtml``: the
  prose is extracted (``data.text_markup``: markup dropped, code blocks dropped, inline
  code kept);
* a suffix in ``OTHER_FORMATS`` (images, PDF, archives, data files, source code): not
  opened, skipped as "other format";
* anything else (``NEWS``, ``changelog.Debian``, ``README.Debian``, ``notes.log``): read as
  plain text when its bytes are text, skipped as binary otherwise. Documentation folders
  name their text files this way (GNU and Debian docs have no suffix).
"""
from __future__ import annotations

import dataclasses
import posixpath

from data import text_decode, text_markup, walk
from data.text_corpus import Skip

PLAIN_SUFFIXES = (".txt", ".text")
OTHER_FORMATS = frozenset("""
.png .jpg .jpeg .gif .bmp .tif .tiff .webp .ico .svg .svgz .eps .xcf .psd
.mp3 .wav .ogg .flac .mp4 .mkv .avi .mov .webm .ttf .otf .woff .woff2
.pdf .ps .dvi .doc .docx .odt .ods .odp .rtf .epub .xls .xlsx .ppt .pptx
.zip .tar .tgz .tbz2 .txz .7z .rar .zst .lz4 .deb .rpm .jar .whl .egg .iso .dmg .img
.so .o .a .dll .exe .class .pyc .pyo .wasm
.json .jsonl .xml .yaml .yml .toml .csv .tsv .ini .cfg .conf .sqlite .db .parquet .npy .npz .pkl .pickle
.tfrecord .pb .h5 .onnx .pem .crt .key .asc .gpg .sig
.c .h .cc .cpp .hpp .cxx .py .pyi .pl .pm .rb .js .mjs .ts .css .scss .java .go .rs .sh .bash .zsh
.awk .sed .el .lua .php .swift .kt .scala .sql .r .cocci .patch .diff .mk .cmake .bat .ps1 .ipynb
""".split())


@dataclasses.dataclass(frozen=True)
class FileWords:
    words: list[str]
    encoding: str
    guessed: bool   # the encoding is a detected fallback (named in the run summary)
    size: int = 0   # bytes of text once decompressed (counted against --max-text-mb)


def kind_of(name: str) -> str | None:
    """``text_markup`` kind of a file name (``PLAIN`` for unknown suffixes), None for another format."""
    base = name.lower()
    compression = text_decode.compression_of(base)
    base = base[: len(base) - len(compression)] if compression else base
    suffix = posixpath.splitext(base)[1]
    if suffix in PLAIN_SUFFIXES:
        return text_markup.PLAIN
    if suffix in text_markup.MARKUP_SUFFIXES:
        return text_markup.MARKUP_SUFFIXES[suffix]
    return None if suffix in OTHER_FORMATS else text_markup.PLAIN


def list_text_files(root: str, is_folder: bool, follow_links: bool = False) -> tuple[list[walk.File], list[Skip]]:
    """The candidate documents of a folder (or the one file ``root``), and the entries skipped
    without opening them: other formats, fifos and devices, symlink loops, unreadable entries, symbolic
    links leaving the folder (unless ``follow_links``: ``--follow-links``)."""
    if is_folder:
        files, problems = walk.walk(root, follow_links)
    else:
        found = walk.stat_one(root)
        files, problems = ([found], []) if isinstance(found, walk.File) else ([], [found])
    skipped = [Skip(p.relative, p.reason, p.detail) for p in problems]
    documents = []
    for file in files:
        if kind_of(file.relative) is None:
            skipped.append(Skip(file.relative, "format", posixpath.splitext(file.relative)[1].lower() + " file"))
        elif file.size > text_decode.MAX_TEXT_BYTES:
            skipped.append(Skip(file.relative, "too_large", f"{file.size // 2**20} MiB"))
        else:
            documents.append(file)
    return documents, skipped


def read_words(uri: str, name: str, limit: int = text_decode.MAX_TEXT_BYTES) -> FileWords | text_decode.Unusable:
    """The words of the file at ``uri`` (``name``: its file name, which decides the format); at most ``limit``
    bytes of text once decompressed."""
    data = _read_bytes(uri)
    if isinstance(data, text_decode.Unusable):
        return data
    data = text_decode.decompress(data, text_decode.compression_of(name), min(limit, text_decode.MAX_TEXT_BYTES))
    if isinstance(data, text_decode.Unusable):
        return data
    decoded = text_decode.decode(data)
    if isinstance(decoded, text_decode.Unusable):
        return decoded
    kind = kind_of(name) or text_markup.PLAIN
    return FileWords(text_markup.prose(decoded.text, kind).split(), decoded.encoding, decoded.guessed, len(data))


def _read_bytes(uri: str) -> bytes | text_decode.Unusable:
    """The file's bytes; only ever called on what ``data.walk`` listed as a regular file."""
    if walk.is_uri(uri):
        import tensorflow as tf

        try:
            with tf.io.gfile.GFile(uri, "rb") as handle:
                return handle.read()
        except (tf.errors.OpError, OSError) as error:
            return text_decode.Unusable("unreadable", walk.message(error))
    try:
        with open(uri, "rb") as handle:
            return handle.read()
    except OSError as error:
        return text_decode.Unusable("unreadable", walk.message(error))
