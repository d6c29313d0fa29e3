"""Text that leaves the process (terminal, logs, CSV, HTML, JSON) takes any bytes a file name holds.

A POSIX file name is bytes; Python hands one that is not UTF-8 on as a string with lone surrogates
(``b"bad\\xff.png"`` -> ``"bad\\udcff.png"``, PEP 383), and every strict UTF-8 encoder (a text file,
a pipe's stdout, ``str.encode()``) then raises ``UnicodeEncodeError`` in the middle of a message or a
report. One codec error handler, registered when any process of this project starts (``import
stackenv``), writes such a byte as ``\\xNN``, the way ``data/walk.py printable`` shows a name, and any
other unencodable character as ``\\uNNNN``; every writer of user-given text names it as ``errors=``.
"""
import codecs
import sys

#: ``errors=`` for every writer of text that may hold a user-given string.
ERRORS = "project-printable"


def _printable(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    shown = []
    for char in error.object[error.start:error.end]:
        code = ord(char)
        shown.append(f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF
                     else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(shown), error.end


codecs.register_error(ERRORS, _printable)


def printable(text: str) -> str:
    """``text`` as UTF-8 takes it: bytes that are not UTF-8 as ``\\xNN`` (a UTF-8 string unchanged)."""
    return text.encode("utf-8", ERRORS).decode("utf-8")


def encode(text: str) -> bytes:
    """``text`` as UTF-8 bytes, whatever it holds."""
    return text.encode("utf-8", ERRORS)


def guard_standard_streams() -> None:
    """stdout and stderr write any string: a listing that prints a file name never ends in a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=ERRORS)
            except (ValueError, OSError):  # a closed or detached stream: nothing to guard
                pass
