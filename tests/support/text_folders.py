"""Text folders as users have them, built at test time from real Debian documentation.

The real part is copied from ``/usr/share/doc`` of packages every Debian-based machine with
Python and git has (bash, coreutils, apt, git, python3, ...): compressed NEWS and changelog
files (no ``.txt`` suffix: ``NEWS.Debian.gz``, ``changelog.gz``) and Markdown READMEs. Only
the cases no package ships are generated: a short file, an empty file, a Latin-1 file and
a binary file.
"""
from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

DOC_ROOT = "/usr/share/doc"
PACKAGES = ("bash", "coreutils", "apt", "git", "python3*", "adduser", "base-files", "dpkg", "tar", "gzip",
            "sed", "grep", "findutils", "diffutils", "perl-base", "zstd", "libffi8", "procps", "debianutils")
#: What the synthetic files are skipped as (data/text_corpus.py REASONS keys).
SYNTHETIC = {"short.txt": "short", "empty.txt": "empty", "blob.bin": "binary"}
LATIN1 = "latin1.txt"


def real_documents(kinds: tuple[str, ...] = ("NEWS*.gz", "changelog*.gz"), max_bytes: int = 6000,
                   limit: int = 10) -> list[str]:
    """Up to ``limit`` real files of these name patterns (compressed size <= ``max_bytes``), sorted."""
    found = set()
    for package in PACKAGES:
        for pattern in kinds:
            found.update(p for p in glob.glob(os.path.join(DOC_ROOT, package, pattern))
                         if os.path.isfile(p) and not os.path.islink(p) and 300 < os.path.getsize(p) <= max_bytes)
    return sorted(found)[:limit]


def debian_mixed_folder(root: Path, news: int = 10, readmes: int = 3, max_bytes: int = 6000,
                        require_real: bool = True) -> dict[str, str]:
    """Build the folder; returns ``{relative path: expected skip reason}`` for the files added to
    be skipped (the real files are all expected to be read). Without docs on this machine: skips
    the test, or (``require_real=False``) builds the synthetic part alone."""
    compressed = real_documents(limit=news, max_bytes=max_bytes)
    markdown = real_documents(("README.md", "*.md.gz", "*.md"), max_bytes=max_bytes, limit=readmes)
    if require_real and (len(compressed) < 4 or not markdown):
        pytest.skip(f"{DOC_ROOT} holds too few Debian documentation files (docs excluded from this image)")
    (root / "news").mkdir(parents=True)
    for path in compressed:
        shutil.copy(path, root / "news" / f"{Path(path).parent.name}-{Path(path).name}")
    for path in markdown:
        shutil.copy(path, root / f"{Path(path).parent.name}-{Path(path).name}")
    (root / "short.txt").write_text("Four words, no more.\n")  # below any window of 6+ words
    (root / "empty.txt").write_bytes(b"")
    latin = ("Le caf\u00e9 est tr\u00e8s bon, voil\u00e0 o\u00f9 nous \u00e9tions hier soir avec les "
             "enfants, \u00e0 c\u00f4t\u00e9 de la for\u00eat. ") * 8
    (root / LATIN1).write_bytes(latin.encode("latin-1"))
    with open(shutil.which("ls") or "/bin/ls", "rb") as handle:  # a real ELF binary's first bytes
        (root / "blob.bin").write_bytes(handle.read(4096))
    return dict(SYNTHETIC)
