"""Listing an image folder through ``tf.io.gfile``: the one place that says what a class
folder must look like, and what in it is not read.

Both ingestion paths (the prepare step and the ExampleGen) list a source with
``sources.list_source``, which lists folders here, so a local path, ``gs://`` and ``s3://`` give
the same classes, the same walk order and the same paragraphs for bad input. Whatever a
listing passes over (hidden files, a class folder named with a leading dot, files of other
types, fifos and devices) is recorded in :class:`Unused` and named in the run summary:
data left out silently reads as data used. A local entry that is neither a regular file
nor a folder is never opened (opening a fifo blocks until someone writes to it).
"""
from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from data.errors import DataError
from data.prepare import special_file
from data.walk import SPECIAL, is_uri, isdir, listdir, outside_detail, outside_target, printable, walk

#: Every format Pillow decodes without a plugin; an animated GIF gives its first frame.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff")
IGNORED_DIRS = frozenset({"__MACOSX"})  # OS metadata folders, never classes
#: How many unused entries the summary names before it only counts.
SHOWN_UNUSED = 5


@dataclasses.dataclass
class Unused:
    """Entries a listing saw and will not read, each with why."""

    entries: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Files read whose names are not UTF-8, in their printable form (``data.walk.printable``).
    not_utf8: list[str] = dataclasses.field(default_factory=list)

    def add(self, path: str, why: str) -> None:
        self.entries.append((printable(path), why))

    def read_not_utf8(self, path: str) -> None:
        self.not_utf8.append(printable(path))

    def __bool__(self) -> bool:
        return bool(self.entries or self.not_utf8)

    def facts(self) -> dict:
        """What the data facts carry: the count and the first few, so a million skipped files stay small."""
        facts = {"count": len(self.entries),
                 "shown": [f"{path} ({why})" for path, why in self.entries[:SHOWN_UNUSED]]}
        if self.not_utf8:
            facts["not_utf8"] = {"count": len(self.not_utf8), "shown": self.not_utf8[:SHOWN_UNUSED]}
        return facts


def unused_line(facts: dict | None) -> str | None:
    """The run summary's line for :meth:`Unused.facts` (and the names read that are not UTF-8), None when
    everything was read under a UTF-8 name."""
    if not facts:
        return None
    lines = []
    if facts.get("count"):
        more = facts["count"] - len(facts["shown"])
        lines.append(f"Not read from the data: {facts['count']} entr{'y' if facts['count'] == 1 else 'ies'}: "
                     + "; ".join(facts["shown"]) + (f"; and {more} more" if more > 0 else ""))
    lines.extend(filter(None, [not_utf8_line(facts.get("not_utf8"))]))
    return "\n".join(lines) or None


def not_utf8_line(facts: dict | None) -> str | None:
    """The summary's line for files read whose names are not UTF-8 (named with ``\\xNN`` for each such byte)."""
    if not facts or not facts.get("count"):
        return None
    more = facts["count"] - len(facts["shown"])
    return (f"Read under names that are not UTF-8 (each such byte shown as \\xNN; renaming them to UTF-8 is "
            f"safer for other tools): {facts['count']} file{'' if facts['count'] == 1 else 's'}: "
            + "; ".join(facts["shown"]) + (f"; and {more} more" if more > 0 else ""))


_SPECIAL = "not a regular file (a fifo, socket or device): never opened"


def join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name.strip("/")


def _names(root: str) -> list[str]:
    try:
        return sorted(set(listdir(root)))  # local names that are not UTF-8 kept (as surrogate escapes)
    except (tf.errors.OpError, OSError) as exc:
        raise DataError(
            f"Cannot list folder {printable(root)} ({getattr(exc, 'message', None) or exc.strerror}). Check that it "
            "exists and is readable by the user (or service account) running the pipeline."
        ) from exc


def visible_names(root: str, ignored: frozenset[str] = frozenset()) -> list[str]:
    """Sorted children of ``root`` (any gfile URI) without hidden entries and ``ignored`` names."""
    return [n for n in _names(root) if not n.startswith(".") and n not in ignored]


def find_files(root: str, suffixes: tuple[str, ...], ignored: frozenset[str] = frozenset(),
               unused: Unused | None = None, follow_links: bool = False, within: str | None = None) -> list[str]:
    """Files below ``root`` ending in ``suffixes`` (any case), in walk order (``data.walk``: a folder's files,
    then its sub-folders, both sorted; symlink loops and second paths to a folder are not followed).
    Everything else it passes over goes to ``unused``: hidden entries, ``ignored`` folders, other files,
    special files (never opened) and, unless ``follow_links``, symbolic links leading out of ``within``
    (default ``root``)."""
    unused = unused if unused is not None else Unused()
    files, problems = walk(root, follow_links=follow_links, hidden=True, within=within)
    for problem in problems:
        unused.add(problem.uri, _SPECIAL if problem.reason == SPECIAL else problem.detail)
    found, skipped = [], set()
    for file in files:
        folders = file.relative.split("/")[:-1]
        metadata = next((i for i, name in enumerate(folders) if name in ignored), None)
        if metadata is not None:
            folder = join(root, "/".join(folders[:metadata + 1]))
            if folder not in skipped:
                skipped.add(folder)
                unused.add(folder + "/", "OS metadata folder")
        elif file.uri.lower().endswith(suffixes):
            found.append(file.uri)
            if file.not_utf8:
                unused.read_not_utf8(file.uri)
        else:
            unused.add(file.uri, f"not a {'/'.join(s.lstrip('.') for s in suffixes)} file")
    return found


def list_class_files(root: str, unused: Unused | None = None, follow_links: bool = False) -> dict[str, list[str]]:
    """Class name -> its image files (searched recursively), both sorted; DataError for a
    folder that is not one sub-folder of images per class. What is not read goes to ``unused``:
    a symbolic link leading out of ``root`` too, unless ``follow_links`` (``--follow-links``)."""
    unused = unused if unused is not None else Unused()
    fence = None if follow_links or is_uri(root) else os.path.realpath(root)
    names = _names(root)
    leaving = {n: t for n in names if fence and (t := outside_target(join(root, n), fence))}
    for name, target in leaving.items():
        unused.add(join(root, name), outside_detail(target))
    names = [n for n in names if n not in leaving]
    visible = [n for n in names if not n.startswith(".") and n not in IGNORED_DIRS]
    class_dirs = [n for n in visible if isdir(join(root, n))]
    if not class_dirs:
        if any(n.lower().endswith(IMAGE_SUFFIXES) for n in visible):
            raise DataError(
                f"Folder {root} holds images directly, but images must be grouped in one "
                "sub-folder per class (e.g. cats/ and dogs/), the sub-folder name being the "
                "class name. Move each image into the sub-folder of its class."
            )
        what = "is empty" if not visible else "has no class sub-folders"
        raise DataError(
            f"Image folder {root} {what}. Put the images in one sub-folder per class (e.g. "
            f"{root}/cats/*.png and {root}/dogs/*.png), with at least two classes."
        )
    for name in names:
        path = join(root, name)
        if name in class_dirs:
            continue
        if isdir(path):
            unused.add(path + "/", "its name starts with a dot: not a class" if name.startswith(".")
                       else "OS metadata folder")
        else:
            unused.add(path, _SPECIAL if special_file(path) else "hidden" if name.startswith(".")
                       else "not in a class folder")
    per_class = {}
    for name in class_dirs:
        images = find_files(join(root, name), IMAGE_SUFFIXES, IGNORED_DIRS, unused, follow_links, within=root)
        if not images:
            raise DataError(
                f"Class folder {printable(join(root, name))} contains no images (files ending in "
                f"{', '.join(IMAGE_SUFFIXES)}). Add images of class '{printable(name)}' to "
                "it, or move the folder out of the data folder if it is not a class."
            )
        per_class[printable(name)] = images  # the class name as the model and the summary show it
    if len(class_dirs) < 2:
        raise DataError(
            f"Image folder {root} has only one class ('{printable(class_dirs[0])}'), but a "
            "classifier needs at least two. Add a sub-folder of images for each other class."
        )
    return per_class
