"""Which run a report shows, and whether a later run failed.

The report draws the newest *evaluation*; after a failed run that is an earlier run's, and
without saying so a user would read old numbers as the answer to the run that just failed.
MLMD knows only runs that reached a component; a run stopped or failed before that (bad
data found while preparing it, Ctrl-C, SIGTERM, a kill) is known from the outcome the run
lock recorded (``pipeline/results/run_outcome.py``).
"""
from __future__ import annotations

import dataclasses

from pipeline.report.evaluations import find_latest_evaluation
from pipeline.results import mlmd
from pipeline.results.run_outcome import unsuccessful_attempt


@dataclasses.dataclass(frozen=True)
class ShownRun:
    shown: str | None          # pipeline_run of the evaluation the report shows
    latest: str | None         # the most recent pipeline_run of that pipeline
    latest_failed: list[str]      # nodes that failed in the latest run
    finished: str                 # when the shown evaluation finished
    last_attempt: str = ""        # how the last run attempt ended, when it did not succeed (run_outcome.Attempt)

    @property
    def is_latest(self) -> bool:
        return self.shown == self.latest and not self.latest_failed and not self.last_attempt

    def describe(self, logs_dir: str = "output/logs") -> str:
        line = f"Shows run {self.shown} (evaluated {self.finished})."
        if self.is_latest:
            return line + " It is the latest run."
        if self.shown == self.latest and not self.latest_failed:  # MLMD saw nothing of the last attempt
            attempt = self.last_attempt.replace("The previous run on this output", "The latest attempt")
            return (f"{line} NOT THE LATEST ATTEMPT: {attempt} This report describes an earlier run; "
                    f"fix and re-run (a failure's traceback is in {logs_dir}).")
        why = (f"failed in {', '.join(self.latest_failed)}" if self.latest_failed
               else "did not produce a new evaluation")
        return (f"{line} NOT THE LATEST ATTEMPT. The latest run, {self.latest}, {why}: this report describes "
                f"the earlier run. Fix and re-run; the failure's traceback is in {logs_dir}.")


def shown_run(output_dir: str, pipeline_name: str | None = None) -> ShownRun:
    evaluation = find_latest_evaluation(output_dir, pipeline_name)
    store = mlmd.open_output_store(output_dir)
    latest = mlmd.latest_run(store, evaluation.pipeline_name)
    latest_name = next((mlmd.run_name(store, e.execution) for e in latest.values()), evaluation.run_name)
    failed = sorted(node for node, execution in latest.items() if execution.state == "FAILED")
    return ShownRun(evaluation.run_name, latest_name, failed, f"{evaluation.finished:%Y-%m-%d %H:%M:%S}",
                    unsuccessful_attempt(output_dir))
