"""Every HTTP exchange of ``deploy`` ends: an overall deadline per call and a cap on the body read.

Why: urllib3's and requests' timeouts bound each *read*, not the exchange. A server that sends its
headers and then one byte a second never trips a 10 s read timeout, and ``deploy`` sat silent for
minutes; one that streams an endless body fills memory. So each call runs under :func:`deadline`
and every body, ours and the kfp client's (pipeline/kubeflow/connection.py: bound_client_io), is read
through :func:`read_capped`.

The deadline is a ``SIGALRM`` timer in the main thread: it interrupts a blocking read wherever it
is. No signal reaches another thread (deploy called from a notebook's or a service's worker thread),
so there a timer thread raises the same exception in the caller asynchronously; CPython delivers it
between two bytecodes, i.e. when the blocked read returns: a server that drips bytes is cut at the
deadline, one that sends nothing at the deadline plus at most one read timeout, which every call
here sets.
"""
from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: The most a KFP health, dashboard or login answer may hold: each is a small JSON or HTML page.
SMALL_BODY_BYTES = 1 << 20
#: The most a KFP API answer may hold: a page of pipeline versions, each with its whole spec.
API_BODY_BYTES = 64 << 20
_CHUNK = 64 * 1024


class _Expired(BaseException):
    """Raised by the alarm; a BaseException so that no library's ``except Exception`` swallows it."""


@contextlib.contextmanager
def deadline(seconds: float, expired: Callable[[], BaseException]) -> Iterator[None]:
    """Run the block for at most ``seconds``, then raise ``expired()``. An outer deadline that comes
    first stays in force (nested calls never extend it); any thread (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        with _deadline_by_timer_thread(seconds, expired):
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


#: The deadline each thread's innermost timer-thread deadline ends at (time.monotonic()).
_thread_deadlines = threading.local()


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    """CPython's PyThreadState_SetAsyncExc: ``exception`` is raised in that thread at its next bytecode
    (None takes back one not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exception) if exception else None)


@contextlib.contextmanager
def _deadline_by_timer_thread(seconds: float, expired: Callable[[], BaseException]) -> Iterator[None]:
    ends = time.monotonic() + seconds
    outer_ends = getattr(_thread_deadlines, "ends", None)
    if outer_ends is not None and outer_ends <= ends:
        yield
        return
    caller, lock, state = threading.get_ident(), threading.Lock(), {"done": False, "fired": False}
    mine: type[_Expired] = type("_Expired", (_Expired,), {})  # an outer deadline's own passes through this one

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _raise_in(caller, mine)

    timer = threading.Timer(max(seconds, 0.001), fire)
    timer.daemon = True
    _thread_deadlines.ends = ends
    try:
        try:
            timer.start()
            yield
        finally:  # ``mine`` may still arrive in here: the except below turns it into expired() too
            with lock:
                state["done"] = True
            timer.cancel()
            if state["fired"]:
                _raise_in(caller, None)
    except mine:
        raise expired() from None
    finally:
        _thread_deadlines.ends = outer_ends


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
