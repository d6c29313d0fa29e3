"""From a text file's bytes to its text: decompression, binary check, encoding.

Why this is its own step: users' documentation folders hold compressed files (Debian's
``/usr/share/doc`` gzips most of them), legacy single-byte files next to UTF-8 ones, and
the odd binary file. None of these may stop a run: each file either yields text or a
:class:`Unusable` saying why not, and the caller counts and names it.

Rules, in this order:

1. Compression by suffix: ``.gz``, ``.bz2``, ``.xz`` (stdlib codecs). A corrupt stream is
   unusable ("unreadable"); more than ``MAX_TEXT_BYTES`` once decompressed is unusable
   ("too large"), so a compression bomb cannot exhaust memory.
2. A byte-order mark decides: UTF-8 (dropped), UTF-16 LE/BE, UTF-32 LE/BE.
3. Without a BOM, NUL bytes (or many other control bytes) mean binary: unusable.
4. Valid UTF-8 is UTF-8.
5. Otherwise a legacy single-byte file: Windows-1252 (a superset of Latin-1's printable
   characters, the usual legacy encoding of Western text) unless ``charset-normalizer``
   finds text in a non-Latin script (Cyrillic, Greek, Hebrew, Arabic, Thai), then its
   guess. Its own first guess is not used for Latin text: on short samples it picks
   cp1250 or mac_turkish for plain French or German. The encoding used is returned, so
   the run summary can name every file read with a guessed encoding.
"""
from __future__ import annotations

import bz2
import codecs
import dataclasses
import gzip
import io
import lzma
import unicodedata
import zlib
from collections.abc import Callable

# Readers over a file object: read(n) stops after n bytes of output, across gzip members too.
COMPRESSIONS: dict[str, Callable[[io.BytesIO], io.BufferedIOBase]] = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw), ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}
#: Decompressed bytes above which a file is not read as one document (compression bombs).
MAX_TEXT_BYTES = 256 * 1024 * 1024
FALLBACK_ENCODING = "cp1252"
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_NON_LATIN = ("CYRILLIC", "GREEK", "HEBREW", "ARABIC", "THAI", "ARMENIAN", "GEORGIAN")
# Control bytes that text never holds (whitespace, ESC for terminal colours and form feed excluded).
_CONTROL = bytes(set(range(32)) - {9, 10, 11, 12, 13, 27})


@dataclasses.dataclass(frozen=True)
class Unusable:
    """Why a file yields no text: ``reason`` is a key of ``data.text_corpus.REASONS``."""

    reason: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str          # the codec used
    guessed: bool = False  # True: no BOM and not UTF-8, the encoding is a detected fallback


def compression_of(name: str) -> str:
    """The compression suffix of a file name (``".gz"``, ...), or ``""``."""
    lower = name.lower()
    return next((suffix for suffix in COMPRESSIONS if lower.endswith(suffix)), "")


def decompress(data: bytes, compression: str, limit: int | None = None) -> bytes | Unusable:
    """``data`` decompressed, reading at most ``limit`` + 1 bytes of output (``limit``: the smaller of the
    per-file cap and what is left of the corpus budget, ``--max-text-mb``)."""
    if not compression:
        return data
    limit = MAX_TEXT_BYTES if limit is None else min(limit, MAX_TEXT_BYTES)
    try:
        with COMPRESSIONS[compression](io.BytesIO(data)) as stream:
            result = stream.read(limit + 1)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as error:
        return Unusable("unreadable", f"corrupt {compression[1:]} data: {error}")
    if len(result) > limit:
        flag = " (--max-text-mb raises it)" if limit < MAX_TEXT_BYTES else ""
        return Unusable("too_large", f"more than {max(limit // 2**20, 1)} MiB once decompressed{flag}")
    return result


def decode(data: bytes) -> Decoded | Unusable:
    """The text of ``data`` (already decompressed), by the rules in the module docstring."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return Decoded(data[len(bom):].decode(encoding, errors="replace"), encoding)
    if b"\x00" in data:
        return Unusable("binary", "NUL bytes")
    head = data[:8192]
    if head and len(head) - len(head.translate(None, _CONTROL)) > len(head) // 20:
        return Unusable("binary", "control bytes")
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    return Decoded(*_legacy(data), guessed=True)


def _legacy(data: bytes) -> tuple[str, str]:
    import charset_normalizer

    best = charset_normalizer.from_bytes(data).best()
    if best is not None and _non_latin(str(best)):
        return str(best), best.encoding
    try:
        return data.decode(FALLBACK_ENCODING), FALLBACK_ENCODING
    except UnicodeDecodeError:  # the five bytes cp1252 leaves undefined: Latin-1 maps every byte
        return data.decode("latin-1"), "latin-1"


def _non_latin(text: str) -> bool:
    """Whether most non-ASCII letters of ``text`` belong to a non-Latin script."""
    letters = [c for c in text if ord(c) > 127 and c.isalpha()]
    foreign = sum(1 for c in letters if unicodedata.name(c, "").startswith(_NON_LATIN))
    return bool(letters) and foreign > len(letters) // 2
