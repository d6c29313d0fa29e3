"""One way to open a file a user named on the command line (issue 44).

Every flag that names a file (``--token-file``, ``--session-cookie-file``, ``--dex-password-file``,
``--ca-bundle``, ``--hyperparameters``, ``deploy --package``, ``predict``'s TFLite model, a serving
version's ``push_info.json``) reads it through :func:`read_user_file`: a regular file only (a FIFO
would block forever, ``/dev/zero`` never ends, a directory is not a file: each named by its kind in
one paragraph), at most ``max_bytes`` (a cap fit to the file's purpose: a token is small), and a
parse error (:func:`read_user_json`) as one paragraph naming the file and the flag.

Sits beside :mod:`stackenv.errors`: imports nothing of the project and nothing heavy.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from stackenv.errors import ProjectError

KIB = 1024
MIB = 1024 * KIB

#: Caps fit to each kind of file (a generous margin over any real one).
SECRET_MAX_BYTES = 64 * KIB           # a bearer token, a password, a session cookie
CA_BUNDLE_MAX_BYTES = 4 * MIB         # a PEM bundle (the system's whole store is ~200 KB)
CONFIG_MAX_BYTES = 16 * MIB           # JSON/YAML the project reads whole (hyperparameters, a pipeline package)
SMALL_JSON_MAX_BYTES = 4 * MIB        # push_info.json and the like
TFLITE_MAX_BYTES = 2 * 1024 * MIB     # a flatbuffer cannot exceed 2 GiB


class UserFileError(ProjectError, ValueError):
    """A file named by a flag is not a regular file, too big, unreadable or does not parse."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), which would block until something writes to it"
    if stat.S_ISCHR(mode):
        return "a character device (such as /dev/zero or a terminal), which may never end"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size_words(count: int) -> str:
    if count >= MIB:
        return f"{count / MIB:.1f} MiB"
    if count >= KIB:
        return f"{count / KIB:.1f} KiB"
    return f"{count} bytes"


def _label(flag: str | None, path: str) -> str:
    return f"{flag} {path}" if flag else str(path)


def open_user_file(path: str | os.PathLike, *, flag: str | None, what: str, max_bytes: int) -> int:
    """A read-only descriptor on ``path`` after checking it is a regular file of at most ``max_bytes``.

    Opened non-blocking, so a FIFO swapped in after the check cannot hang the open; checked again
    on the descriptor (``fstat``), so what is read is what was checked.
    """
    path = os.fspath(path)
    label = _label(flag, path)
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise UserFileError(_os_message(label, error, what), path) from None
    if not stat.S_ISREG(mode):
        raise UserFileError(f"{label} is {kind_of(mode)}, not a regular file: pass a file holding {what}.", path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise UserFileError(_os_message(label, error, what), path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"{label} is {kind_of(info.st_mode)}, not a regular file: pass a file holding "
                                f"{what}.", path)
        if info.st_size > max_bytes:
            raise UserFileError(_too_big(label, info.st_size, max_bytes, what), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _too_big(label: str, size: int, max_bytes: int, what: str) -> str:
    return (f"{label} is {_size_words(size)}, more than {what} can be (at most {_size_words(max_bytes)}): "
            "check that the flag names the right file.")


def _os_message(label: str, error: OSError, what: str) -> str:
    if error.errno == errno.ENOENT:
        return f"{label} does not exist: pass a file holding {what}."
    return f"{label} cannot be read ({error.strerror}): pass a readable file holding {what}."


def read_user_bytes(path: str | os.PathLike, *, flag: str | None, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (never more are read, whatever the file claims)."""
    fd = open_user_file(path, flag=flag, what=what, max_bytes=max_bytes)
    label = _label(flag, os.fspath(path))
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            try:
                chunk = os.read(fd, min(1 * MIB, max_bytes + 1 - total))
            except OSError as error:
                raise UserFileError(_os_message(label, error, what), os.fspath(path)) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # grew while read
                raise UserFileError(_too_big(label, total, max_bytes, what), os.fspath(path))
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_user_file(path: str | os.PathLike, *, flag: str | None, what: str, max_bytes: int,
                   encoding: str = "utf-8") -> str:
    """The text of a regular file of at most ``max_bytes``; undecodable bytes are one paragraph naming it."""
    data = read_user_bytes(path, flag=flag, what=what, max_bytes=max_bytes)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise UserFileError(f"{_label(flag, os.fspath(path))} is not {encoding} text (byte {error.start}: "
                            f"{error.reason}): pass a text file holding {what}.", os.fspath(path)) from None


def read_user_json(path: str | os.PathLike, *, flag: str | None, what: str,
                   max_bytes: int = SMALL_JSON_MAX_BYTES) -> Any:
    """The parsed JSON of a regular file; a parse error is one paragraph naming the file and where."""
    text = read_user_file(path, flag=flag, what=what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except ValueError as error:
        detail = f"line {error.lineno} column {error.colno}: {error.msg}" if isinstance(
            error, json.JSONDecodeError) else str(error)
        raise UserFileError(f"{_label(flag, os.fspath(path))} is not valid JSON ({detail}): pass a file "
                            f"holding {what}, or replace it with a good copy.", os.fspath(path)) from None
