"""How the last run on an output directory ended, as its run lock recorded it.

MLMD knows only runs that reached a component; a run stopped or failed before that (bad
data found while preparing it, Ctrl-C, SIGTERM, a kill) is known only from this record,
which ``pipeline/local/run_lock.py`` writes into its lock file (``running`` while it holds
the lock, then ``succeeded``, ``failed`` or ``stopped``). The next run and ``report``
read it here, without importing the runner.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

LOCK_FILE = ".run.lock"
RUNNING, SUCCEEDED, FAILED, STOPPED = "running", "succeeded", "failed", "stopped"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """The last run on an output directory, as its lock file recorded it."""

    pid: int
    started: str
    outcome: str          # RUNNING (and the lock free: the process died), SUCCEEDED, FAILED, STOPPED
    ended: str = ""
    detail: str = ""      # STOPPED: the signal; FAILED: the error's first line

    def describe(self) -> str:
        """One sentence for a run that did not succeed; "" for one that did."""
        when = f"started {self.started} (pid {self.pid})"
        if self.outcome == STOPPED:
            return (f"The previous run on this output, {when}, was stopped by {self.detail or 'a signal'} "
                    f"at {self.ended}.")
        if self.outcome == FAILED:
            return f"The previous run on this output, {when}, failed at {self.ended}: {self.detail}"
        if self.outcome == RUNNING:
            return (f"The previous run on this output, {when}, ended without finishing (killed, e.g. by "
                    "SIGKILL or for lack of memory).")
        return ""


def last_attempt(output_dir: str) -> Attempt | None:
    """The outcome the last run recorded (RUNNING: it is still running or died), None if unknown."""
    path = os.path.join(output_dir, LOCK_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return _parse(handle.read())
    except OSError:
        return None


def _parse(text: str) -> Attempt | None:
    try:
        values = json.loads(text)
        return Attempt(**{f.name: values[f.name] for f in dataclasses.fields(Attempt) if f.name in values})
    except (ValueError, TypeError, KeyError):
        return None  # empty, or written by an older version of this module


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def unsuccessful_attempt(output_dir: str) -> str:
    """One sentence when the last attempt on ``output_dir`` did not succeed (or still runs), else ""."""
    attempt = last_attempt(output_dir)
    if attempt is None or attempt.outcome == SUCCEEDED:
        return ""
    if attempt.outcome == RUNNING and alive(attempt.pid):
        return f"The previous run on this output, started {attempt.started} (pid {attempt.pid}), is still running."
    return attempt.describe()
