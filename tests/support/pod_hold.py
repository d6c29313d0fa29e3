"""A pod's own ``python -m MODULE ARGS``, held at a point of its progress until the emulated cluster kills it.

(Also a local ``python -m pipeline run`` that a test signals in training: tests/test_reliability.py.)

``python tests/support/pod_hold.py -m MODULE ARGS...`` is what tests/support/k8s_tfjob_api.py runs
instead of the container's ``python -m MODULE ARGS...`` for a replica whose death a test injects
(``TFJobApiServer.kill_at``) or whose trials wait for the other runners (``trial_barrier``). Why:
a kill timed in seconds raced the work (issue 47: on a quiet machine the 400 training steps ended
before a worker was killed 20 s after it started, on a loaded one they did not); keyed to progress
and held there, the test means the same on any machine.

- ``POD_HOLD_AT="training steps=5"``: once this process's progress counter of that name
  (``stackenv.progress``: the Trainer's ``StepCounter`` counts "training steps") reaches the number,
  its counts are written to ``PIPELINE_PROGRESS_DIR`` (where the emulator reads them) and the
  counting thread waits there to be killed, so a fast machine cannot finish before the kill; a slow
  one only gets there later. ``"trials begun=1"`` counts the trials a KerasTuner runner begins
  (models/common/tuner.py ``BudgetedTuner.run_trial``). The wait is bounded (``HOLD_S``): a pod
  nobody kills exits ``NOT_KILLED`` with a message instead of hanging.
- ``POD_TRIAL_BARRIER="DIR=N"``: a runner's first trial waits until N runners began one (a file each
  in DIR), so every runner takes a trial however fast the first one to start is (:func:`every_runner_began`).
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time

HOLD_ENV, BARRIER_ENV = "POD_HOLD_AT", "POD_TRIAL_BARRIER"
TRIALS_BEGUN = "trials begun"
#: How long a held pod waits to be killed, and a runner for the others, before giving up with a message.
HOLD_S = BARRIER_S = 600.0
NOT_KILLED = 3


def point(value: str) -> tuple[str, int]:
    """``"training steps=5"`` -> ("training steps", 5)."""
    what, _, n = value.rpartition("=")
    if not what or not n.strip().isdigit() or int(n) < 1:
        raise ValueError(f"{value!r} is no progress point: write COUNTER=N (N >= 1), e.g. 'training steps=5'")
    return what.strip(), int(n)


def every_runner_began(folder: str, runner: str, runners: int, wait_s: float = BARRIER_S, poll_s: float = 0.1) -> None:
    """Mark that ``runner`` began a trial in ``folder``; wait until ``runners`` have (bounded: RuntimeError)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, runner), "w"):
        pass
    deadline = time.monotonic() + wait_s
    while len(os.listdir(folder)) < runners:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{runner} waited {wait_s:.0f} s for {runners} trial runners to begin a trial; only "
                               f"{sorted(os.listdir(folder))} did (a runner never started, or took no trial)")
        time.sleep(poll_s)


def _hold(what: str, point: int, n: int, hold_s: float) -> None:
    """Hold at ``point`` of ``what`` (the line names the point asked for: a count may pass it in one step, as
    the Trainer's does when Keras runs 16 training steps per call; ``n`` is where it stands)."""
    from stackenv import progress

    progress.flush()
    print(f"pod_hold: reached {point} {what}; held here until the cluster kills this pod ({n} counted)",
          file=sys.stderr, flush=True)
    time.sleep(hold_s)
    print(f"pod_hold: held {hold_s:.0f} s at {n} {what} and nobody killed this pod; exiting {NOT_KILLED}",
          file=sys.stderr, flush=True)
    os._exit(NOT_KILLED)


def install(hold_at: tuple[str, int] | None, barrier: tuple[str, int] | None, hold_s: float = HOLD_S) -> None:
    """Count and hold through ``stackenv.progress.count``; count trials and wait at the barrier in ``run_trial``."""
    from stackenv import progress

    seen: dict[str, int] = {}
    passed: list[bool] = []  # this runner passed the barrier (its first trial)
    lock = threading.Lock()
    count = progress.count

    def counted(what: str, n: int = 1, total: int | None = None) -> None:
        count(what, n, total)
        if hold_at is None or what != hold_at[0]:
            return
        with lock:
            seen[what] = seen.get(what, 0) + n
            reached = seen[what] >= hold_at[1]
        if reached:
            _hold(what, hold_at[1], seen[what], hold_s)

    progress.count = counted  # callers look it up on the module at each call (``progress.count(...)``)
    if barrier is None and (hold_at is None or hold_at[0] != TRIALS_BEGUN):
        return
    from models.common import tuner

    run_trial = tuner.BudgetedTuner.run_trial

    def begun(self, trial, *args, **kwargs):
        if barrier is not None and not passed:
            every_runner_began(barrier[0], str(self.tuner_id), barrier[1])
            passed.append(True)
        progress.count(TRIALS_BEGUN, 1)
        return run_trial(self, trial, *args, **kwargs)

    tuner.BudgetedTuner.run_trial = begun  # type: ignore[method-assign]


def racing_run_fn(fn_args) -> None:
    """A Trainer ``run_fn`` for the tests of ``kill_at`` (``tests.support.pod_hold.racing_run_fn``): a worker
    counts ``fn_args.train_steps`` training steps as fast as a loop can, the fastest machine there is; the
    chief counts none and waits, as a multi-worker chief waits for its workers at every step's all-reduce,
    until the cluster deletes it (bounded)."""
    from stackenv import progress

    if json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("type") == "chief":
        time.sleep(HOLD_S)
        sys.exit(f"racing_run_fn: the chief waited {HOLD_S:.0f} s and the cluster never deleted it")
    for _ in range(fn_args.train_steps):
        progress.count("training steps", 1)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] != "-m":
        sys.exit(f"usage: pod_hold.py -m MODULE [ARGS...] (got {argv[:2]}): a pod's `python -m` command")
    hold_at = point(os.environ[HOLD_ENV]) if os.environ.get(HOLD_ENV) else None
    barrier = point(os.environ[BARRIER_ENV]) if os.environ.get(BARRIER_ENV) else None
    install(hold_at, barrier)
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
