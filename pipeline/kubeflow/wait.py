"""Follow a KFP run until it ends, printing each step's state, within a bounded time.

The states and fields are those of the KFP v2beta1 run API (``kfp_server_api`` 2.0.5:
``V2beta1Run.state``, ``run_details.task_details[].display_name/state/pod_name/error``). A
failed or timed-out run is a DeployError naming the failed steps and where their logs are.
"""
import time
from collections.abc import Callable
from typing import Any

from pipeline.kubeflow.connection import DeployError

FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")
# Driver and DAG bookkeeping tasks the KFP UI hides too.
_HIDDEN = ("root", "root-driver", "executor")


def _task_states(run: Any) -> dict[str, Any]:
    details = getattr(run, "run_details", None)
    tasks = getattr(details, "task_details", None) or []
    return {t.display_name: t for t in tasks if t.display_name and t.display_name not in _HIDDEN}


def _log_hint(task: Any, namespace: str | None) -> str:
    pods = [getattr(task, "pod_name", None)] + [c.get("pod_name") if isinstance(c, dict) else
                                                 getattr(c, "pod_name", None) for c in (task.child_tasks or [])]
    pod = next((p for p in pods if p), None)
    if not pod:
        return "its log is in the KFP UI (run details, the step's Logs tab)"
    return f"log: kubectl logs -n {namespace or 'kubeflow'} {pod} -c main"


def follow_run(get_run: Callable[[str], Any], run_id: str, timeout: float, namespace: str | None = None,
               poll: float = 5.0, say: Callable[[str], None] = print,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Poll ``get_run`` (``kfp.Client.get_run``) until the run ends; returns "SUCCEEDED" or raises DeployError."""
    deadline = clock() + timeout
    seen: dict[str, str] = {}
    while True:
        run = get_run(run_id)
        for name, task in sorted(_task_states(run).items()):
            state = str(task.state or "PENDING")
            if seen.get(name) != state:
                seen[name] = state
                say(f"  {name:<20} {state}")
        state = str(run.state or "PENDING")
        if state == "SUCCEEDED":
            say(f"Run {run_id} succeeded.")
            return state
        if state in FINAL_STATES:
            failed = [(n, t) for n, t in sorted(_task_states(run).items()) if str(t.state) == "FAILED"]
            steps = "; ".join(
                f"{name} failed ({getattr(task.error, 'message', '') or 'no message'}), {_log_hint(task, namespace)}"
                for name, task in failed) or "no step reported a failure"
            error = getattr(getattr(run, "error", None), "message", "") or ""
            raise DeployError(f"Run {run_id} ended {state}{': ' + error if error else ''}. {steps}. "
                              "Fix the step and deploy again (a re-run reuses the cached steps).")
        if clock() >= deadline:
            running = ", ".join(n for n, s in seen.items() if s not in FINAL_STATES) or "none reported yet"
            raise DeployError(f"Run {run_id} had not ended after {timeout:.0f} s (--wait-timeout); still "
                              f"running: {running}. It keeps running on the cluster: follow it in the KFP UI.")
        sleep(min(poll, max(0.0, deadline - clock())))
