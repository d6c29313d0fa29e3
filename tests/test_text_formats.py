"""Reading documents as users have them: markup, compression, encodings, and folder entries that
are not files (data/text_markup.py, data/text_decode.py, data/text_files.py, data/walk.py).

Expected values are written out by hand from the formats' rules, never computed by the code."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from data import text_decode, walk
from data.text_files import kind_of, list_text_files, read_words
from data.text_markup import HTML, MARKDOWN, PLAIN, RST, html_text, markdown_text, rst_text


def words_of(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------- markup

MARKDOWN_DOC = """---
title: front matter is metadata
---
# Install the *tool* #

Run it with `tool --fast` or read [the guide](https://example.org/guide) and ![a diagram](d.png).
Names like snake_case_name keep their underscores; **bold** and _emphasis_ lose their markers.

```bash
pip install tool
```

    indented_code_is_dropped()

- first item
    continues the item
1. numbered item

| column | other |
|--------|-------|
| cell   | value |

[guide]: https://example.org/guide
Setext heading
==============
<div align="center">raw html</div> &amp; <!-- a comment --> <https://auto.link>
"""


def test_markdown_keeps_prose_and_inline_code_drops_code_blocks_and_markup():
    assert words_of(markdown_text(MARKDOWN_DOC)) == (
        "Install the tool Run it with tool --fast or read the guide and a diagram. Names like snake_case_name "
        "keep their underscores; bold and emphasis lose their markers. first item continues the item "
        "numbered item column other cell value Setext heading raw html &")


RST_DOC = """=====
Title
=====

A paragraph with ``literal`` text, :func:`os.path.join`, `a link <https://x.org>`_ and name_ [1]_.

Example::

    code_dropped()

Back to prose.

.. code-block:: python

   also_dropped()

.. note:: A note's title

   :class: tip

   The note's body is prose.

.. _target: https://x.org

.. a comment
   over two lines

>>> doctest_dropped()
42

.. [1] The footnote's text.
"""


def test_rst_keeps_prose_drops_literal_blocks_directives_and_comments():
    assert words_of(rst_text(RST_DOC)) == (
        "Title A paragraph with literal text, os.path.join, a link and name. Example: Back to prose. "
        "A note's title The note's body is prose. The footnote's text.")


def test_html_keeps_body_and_title_drops_scripts_styles_and_pre():
    page = ("<!DOCTYPE html><html><head><title>The title</title><style>p {color: red}</style>"
            "<script>var dropped = 1;</script></head><body><h1>Heading</h1><p>Text &amp; <code>inline</code>"
            " code<br>next line</p><pre>block_code()</pre><ul><li>one</li><li>two</li></ul></body></html>")
    assert words_of(html_text(page)) == "The title Heading Text & inline code next line one two"


def test_html_is_parsed_not_pattern_matched():
    """What regular expressions got wrong: a ``>`` inside an attribute, a closing tag inside a
    comment, an encoding declaration (lxml refuses one on decoded text), an empty page."""
    page = ('<?xml version="1.0" encoding="utf-8"?><p title="a > b">link <!-- </pre> x --> here</p>'
            "<pre>code()</pre>after")
    assert words_of(html_text(page)) == "link here after"
    assert html_text("") == html_text("  \n") == ""


@pytest.mark.parametrize("name,kind", [
    ("a.txt", PLAIN), ("b.TXT.gz", PLAIN), ("NEWS.Debian.gz", PLAIN), ("changelog.Debian.amd64.gz", PLAIN),
    ("README", PLAIN), ("README.md", MARKDOWN), ("x.markdown.bz2", MARKDOWN), ("y.rst.xz", RST),
    ("page.HTM", HTML), ("p.html.gz", HTML), ("photo.png", None), ("data.json.gz", None), ("main.py", None),
    ("blob.bin", PLAIN),  # unknown suffix: read if its bytes are text (data/text_decode.py)
])
def test_format_by_name(name, kind):
    assert kind_of(name) == kind


# ---------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("data,text,encoding", [
    ("\ufeffh\u00e9llo".encode("utf-8"), "h\u00e9llo", "utf-8"),
    ("h\u00e9llo".encode("utf-8"), "h\u00e9llo", "utf-8"),
    ("\ufeffh\u00e9llo".encode("utf-16-le"), "h\u00e9llo", "utf-16-le"),
    ("\ufeffh\u00e9llo".encode("utf-16-be"), "h\u00e9llo", "utf-16-be"),
    ("\ufeffh\u00e9llo".encode("utf-32-le"), "h\u00e9llo", "utf-32-le"),
])
def test_bom_and_utf8_decode_without_guessing(data, text, encoding):
    assert text_decode.decode(data) == text_decode.Decoded(text, encoding, guessed=False)


def test_legacy_files_are_read_with_a_named_guess():
    french = "Le caf\u00e9 est tr\u00e8s bon, voil\u00e0 o\u00f9 nous \u00e9tions. " * 4
    assert text_decode.decode(french.encode("latin-1")) == text_decode.Decoded(french, "cp1252", guessed=True)
    quotes = "He said \u201chello\u201d \u2014 and left\u2026 " * 4
    assert text_decode.decode(quotes.encode("cp1252")) == text_decode.Decoded(quotes, "cp1252", guessed=True)
    russian = "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? " * 6
    decoded = text_decode.decode(russian.encode("cp1251"))
    assert (decoded.text, decoded.guessed) == (russian, True)


@pytest.mark.parametrize("data", [b"ELF\x00\x01text", bytes(range(1, 9)) * 100, "no bom".encode("utf-16-le")])
def test_binary_is_unusable(data):
    assert text_decode.decode(data).reason == "binary"


def test_compressed_forms(monkeypatch):
    text = "caf\u00e9 ".encode() * 50
    assert text_decode.decompress(gzip.compress(text) + gzip.compress(text), ".gz") == text + text  # two members
    assert text_decode.decompress(bz2.compress(text), ".bz2") == text
    assert text_decode.decompress(lzma.compress(text), ".xz") == text
    assert text_decode.decompress(gzip.compress(text)[:-8], ".gz").reason == "unreadable"
    assert text_decode.decompress(b"not xz at all", ".xz").reason == "unreadable"
    monkeypatch.setattr(text_decode, "MAX_TEXT_BYTES", 100)
    assert text_decode.decompress(gzip.compress(b" " * 10_000), ".gz").reason == "too_large"


# ------------------------------------------------------------------ folder entries


def test_entries_that_are_not_files_are_named_never_opened(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("words " * 30)
    (root / "sub" / "b.md.gz").write_bytes(gzip.compress(b"# Title\n\nmarkdown words here"))
    os.mkfifo(root / "pipe.txt")            # opening it for reading would block forever
    (root / "null.txt").symlink_to("/dev/null")  # a character device
    (root / "self.txt").symlink_to("self.txt")   # ELOOP
    (root / "sub" / "up").symlink_to("..")       # a folder loop: walking it never ends
    (root / "gone.txt").symlink_to(root / "missing.txt")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (root / ".hidden.txt").write_text("not listed")
    files, skipped = list_text_files(str(root), is_folder=True)
    assert [f.relative for f in files] == ["a.txt", "sub/b.md.gz"]
    assert {s.document: s.reason for s in skipped} == {
        "pipe.txt": "special", "null.txt": "special", "self.txt": "loop", "sub/up": "loop",
        "gone.txt": "unreadable", "photo.png": "format"}
    details = {s.document: s.detail for s in skipped}
    assert (details["pipe.txt"], details["null.txt"], details["gone.txt"]) == (
        "a fifo", "a character device", "broken symlink")
    assert read_words(files[1].uri, "b.md.gz").words == ["Title", "markdown", "words", "here"]


def _as_nobody(function, *args):
    """``function(*args)`` in a forked child that dropped root (root reads any file), as repr."""
    if os.geteuid() != 0:
        return repr(function(*args))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, only the call
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, repr(function(*args)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        out = handle.read().decode()
    os.waitpid(pid, 0)
    return out


def test_unreadable_file_and_folder_are_named():
    root = Path(tempfile.mkdtemp(prefix="text-perms-"))  # under /tmp, traversable by the dropped user
    try:
        root.chmod(0o755)
        (root / "secret.txt").write_text("words " * 30)
        (root / "secret.txt").chmod(0)
        (root / "closed").mkdir()
        (root / "closed" / "inner.txt").write_text("words " * 30)
        (root / "closed").chmod(0)
        assert "Unusable(reason='unreadable', detail='Permission denied')" == _as_nobody(
            read_words, str(root / "secret.txt"), "secret.txt")
        listed = _as_nobody(walk.walk, str(root))
        assert "Problem(uri=" in listed and "relative='closed', reason='unreadable', detail='cannot list the " \
               "folder: Permission denied'" in listed, listed
    finally:
        (root / "closed").chmod(0o755)
        shutil.rmtree(root)
