"""Every HTTP exchange of ``deploy`` ends: an overall deadline per call and a cap on the body read.

Why: urllib3's and requests' timeouts bound each *read*, not the exchange. A server that sends its
headers and then one byte a second never trips a 10 s read timeout, and ``deploy`` sat silent for
minutes; one that streams an endless body fills memory. So each call runs under :func:`deadline`
(a ``SIGALRM`` timer: it interrupts a blocking read wherever it is, in kfp's client as in ours; in a
thread other than the main one, where no signal can be delivered, the per-read timeouts alone bound
it) and the calls this project makes itself read their body through :func:`read_capped`.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: The most a KFP health, dashboard or login answer may hold: each is a small JSON or HTML page.
SMALL_BODY_BYTES = 1 << 20
_CHUNK = 64 * 1024


class _Expired(BaseException):
    """Raised by the alarm; a BaseException so that no library's ``except Exception`` swallows it."""


@contextlib.contextmanager
def deadline(seconds: float, expired: Callable[[], BaseException]) -> Iterator[None]:
    """Run the block for at most ``seconds``, then raise ``expired()``. An outer deadline that comes
    first stays in force (nested calls never extend it)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:
        yield
        return
    started = time.monotonic()

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Expired()

    outer_handler = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    except _Expired:
        raise expired() from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 0.001))


def read_capped(response: Any, max_bytes: int, too_large: Callable[[int], BaseException]) -> bytes:
    """The body of a urllib3 response opened with ``preload_content=False``, at most ``max_bytes``;
    ``too_large(max_bytes)`` is raised past that, without reading on."""
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > max_bytes:
                raise too_large(max_bytes)
            chunks.append(chunk)
    finally:
        response.release_conn()
