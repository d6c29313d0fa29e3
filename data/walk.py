"""Every file below a folder, found without opening anything and without ever hanging.

Why not ``tf.io.gfile.walk``: on a local disk it follows a directory symlink that points
back up (``docs/up -> ..``) until the path is too long, its ``stat`` raises on a symlink
loop or a dangling link, and it reports a fifo as a file of length 0 (opening that for
reading blocks forever). Here a local path is walked with ``os.scandir`` and every entry
is ``os.stat``-ed (following links) before anyone opens it: only regular files are
returned as files, and everything else is returned as a :class:`Problem` with its reason,
so callers can skip and name it. A URI (``gs://``, ``s3://``) has none of these entry
kinds and is listed through ``tf.io.gfile``.

Hidden entries (names starting with ``.``) are not listed (``hidden=True``: each is a :class:`Problem`,
``HIDDEN``); callers decide what else to keep. Order: a folder's files, then its sub-folders, both
sorted by name. Both families' sources are walked here (text folders, image class folders).
"""
from __future__ import annotations

import dataclasses
import errno
import os
import stat

#: Problem reasons (keys of ``data.text_corpus.REASONS``).
UNREADABLE, SPECIAL, LOOP, OUTSIDE, HIDDEN = "unreadable", "special", "loop", "outside", "hidden"
#: The flag that reads what a symbolic link below the source points to outside it.
FOLLOW_FLAG = "--follow-links"
_KINDS = ((stat.S_ISFIFO, "a fifo"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


@dataclasses.dataclass(frozen=True)
class File:
    uri: str
    relative: str   # posix path below the root, printable (``printable``): ids, names, messages
    size: int
    mtime_ns: int
    not_utf8: bool = False  # the name's bytes are not UTF-8: ``uri`` opens it, ``relative`` names it


def not_utf8(name: str) -> bool:
    """True for a name whose bytes are not UTF-8: ``os.listdir`` gives them as surrogate escapes
    (common on disks written by other systems), which no UTF-8 encoder (TF, protobuf, JSON writers) takes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def printable(name: str) -> str:
    """``name`` as text every writer takes: each byte that is not UTF-8 shown as ``\\xNN``
    (``b'caf\\xe9.txt'`` -> ``caf\\xe9.txt``); a UTF-8 name unchanged."""
    if not not_utf8(name):
        return name
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system gave: escape it as text
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def fs_bytes(path: str) -> bytes:
    """``path``'s bytes as the file system has them (surrogate escapes back to their bytes), for digests."""
    return path.encode("utf-8", "surrogateescape") if not_utf8(path) else path.encode("utf-8")


def isdir(path: str) -> bool:
    """``tf.io.gfile.isdir`` for a URI, ``os.path.isdir`` for a local path (TF's encodes names as UTF-8
    strictly and raises on a name whose bytes are not UTF-8)."""
    if is_uri(path):
        import tensorflow as tf

        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """The names in a folder (a URI through ``tf.io.gfile``; a local folder through ``os.listdir``, whose
    names keep bytes that are not UTF-8 as surrogate escapes where TF's listing raises UnicodeDecodeError)."""
    if is_uri(path):
        import tensorflow as tf

        return [n.rstrip("/") for n in tf.io.gfile.listdir(path)]
    return os.listdir(path)


@dataclasses.dataclass(frozen=True)
class Problem:
    uri: str
    relative: str
    reason: str     # UNREADABLE, SPECIAL or LOOP
    detail: str


def is_uri(path: str) -> bool:
    return "://" in path


def walk(root: str, follow_links: bool = True, hidden: bool = False,
         within: str | None = None) -> tuple[list[File], list[Problem]]:
    """``(files, problems)`` below the folder ``root`` (a local path or a tf.io.gfile URI).

    ``follow_links`` False: a symbolic link whose target lies outside ``root`` is a Problem (``OUTSIDE``,
    named with its target), neither read nor listed below (``--follow-links`` reads it). ``hidden``: hidden
    entries come back as problems (``HIDDEN``), so a caller can name them, instead of being passed over.
    ``within``: the folder links may not lead out of, when ``root`` lies inside it (an image class folder
    inside the data folder); default ``root``."""
    files: list[File] = []
    problems: list[Problem] = []
    if is_uri(root):
        _walk_uri(root.rstrip("/"), "", files, problems, hidden)
    else:
        real = os.path.realpath(root)
        fence = None if follow_links else os.path.realpath(within) if within else real
        _walk_local(root, "", files, problems, {real}, set(), fence, hidden)
    return files, problems


def outside_target(path: str, real_root: str) -> str | None:
    """The target of the symbolic link ``path`` when it is a file or folder that would be read and lies outside
    ``real_root`` (resolved), else None (a broken link, a loop or a device keeps its own reason)."""
    if not os.path.islink(path):
        return None
    target = os.path.realpath(path)
    inside = target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return None
    return None if inside or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) else target


def outside_detail(target: str) -> str:
    return f"symlink to {printable(target)}, outside the folder: not read ({FOLLOW_FLAG} reads it)"


def stat_one(path: str) -> File | Problem:
    """A single file given as the source: a File, or the Problem that keeps it from being read."""
    name = printable(path.rstrip("/").rsplit("/", 1)[-1])
    if is_uri(path):
        import tensorflow as tf

        try:
            info = tf.io.gfile.stat(path)
        except (tf.errors.OpError, OSError) as error:
            return Problem(path, name, UNREADABLE, message(error))
        return File(path, name, info.length, info.mtime_nsec)
    try:
        info = os.stat(path)
    except OSError as error:
        return Problem(path, name, LOOP if error.errno == errno.ELOOP else UNREADABLE, message(error))
    kind = next((what for test, what in _KINDS if test(info.st_mode)), None)
    if kind or not stat.S_ISREG(info.st_mode):
        return Problem(path, name, SPECIAL, kind or "not a regular file")
    return File(path, name, info.st_size, info.st_mtime_ns, not_utf8(path))


def _walk_local(folder: str, relative: str, files: list[File], problems: list[Problem],
                ancestors: set[str], seen: set[str], fence: str | None = None, hidden: bool = False) -> None:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as error:
        problems.append(Problem(folder, relative or ".", UNREADABLE, f"cannot list the folder: {message(error)}"))
        return
    subfolders = []
    for entry in entries:
        rel = f"{relative}/{printable(entry.name)}" if relative else printable(entry.name)
        if entry.name.startswith("."):
            if hidden:
                problems.append(Problem(entry.path, rel, HIDDEN, "hidden"))
            continue
        target = outside_target(entry.path, fence) if fence and entry.is_symlink() else None
        if target:
            problems.append(Problem(entry.path, rel, OUTSIDE, outside_detail(target)))
            continue
        try:
            info = entry.stat(follow_symlinks=True)
        except OSError as error:
            reason = LOOP if error.errno == errno.ELOOP else UNREADABLE
            detail = "symlink loop" if reason == LOOP else (
                "broken symlink" if error.errno == errno.ENOENT and entry.is_symlink() else message(error))
            problems.append(Problem(entry.path, rel, reason, detail))
            continue
        if stat.S_ISDIR(info.st_mode):
            subfolders.append((entry, rel))
        elif stat.S_ISREG(info.st_mode):
            files.append(File(entry.path, rel, info.st_size, info.st_mtime_ns, not_utf8(entry.path)))
        else:
            kind = next((what for test, what in _KINDS if test(info.st_mode)), "not a regular file")
            problems.append(Problem(entry.path, rel, SPECIAL, kind))
    for entry, rel in subfolders:
        real = os.path.realpath(entry.path)
        if real in ancestors:
            problems.append(Problem(entry.path, rel, LOOP, f"symlink loop (links back to {printable(real)})"))
        elif real in seen:
            problems.append(Problem(entry.path, rel, LOOP, f"a second path to {printable(real)}, already read"))
        else:
            seen.add(real)
            _walk_local(entry.path, rel, files, problems, ancestors | {real}, seen, fence, hidden)


def _walk_uri(folder: str, relative: str, files: list[File], problems: list[Problem], hidden: bool = False) -> None:
    import tensorflow as tf

    try:
        names = sorted({n.rstrip("/") for n in tf.io.gfile.listdir(folder)})
    except (tf.errors.OpError, OSError) as error:
        problems.append(Problem(folder, relative or ".", UNREADABLE, f"cannot list the folder: {message(error)}"))
        return
    subfolders = []
    for name in names:
        uri, rel = f"{folder}/{name}", f"{relative}/{name}" if relative else name
        if name.startswith("."):
            if hidden:
                problems.append(Problem(uri, rel, HIDDEN, "hidden"))
            continue
        try:
            if tf.io.gfile.isdir(uri):
                subfolders.append((uri, rel))
                continue
            info = tf.io.gfile.stat(uri)
        except (tf.errors.OpError, OSError) as error:
            problems.append(Problem(uri, rel, UNREADABLE, message(error)))
            continue
        files.append(File(uri, rel, info.length, info.mtime_nsec))
    for uri, rel in subfolders:
        _walk_uri(uri, rel, files, problems, hidden)


def message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__
