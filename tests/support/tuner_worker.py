"""One process of a distributed KerasTuner search (tests/test_tuning_parallel.py starts them).

``python tests/support/tuner_worker.py DIRECTORY TRIALS RUNNERS``; the role comes from KerasTuner's own
environment variables (KERASTUNER_TUNER_ID=chief serves the oracle; tuner0, tuner1, ...
run trials). A worker prints one JSON line: the trials it ran and the best trial it sees.
"""
import json
import os
import sys

import stackenv  # noqa: F401  (first: tf_keras before TensorFlow)

from pod_hold import every_runner_began  # this folder (tests/support/) is the script's sys.path[0]

from models.cnn.hparams import SEARCH_SPACE
from models.common import tuner
from models.common.search_space import TuningSettings


def objective(values, steps):
    return 1.0 - abs(values.get("filters", 16) - 32) / 100 - abs(values.get("dropout", 0.5) - 0.1)


def main(directory: str, trials: int, runners: int) -> None:
    began: list[str] = []

    def trial(values, steps):
        if not began:  # the first trial waits until every runner began one: each takes a trial on any machine
            every_runner_began(os.path.join(directory, "began"), os.environ["KERASTUNER_TUNER_ID"], runners,
                               wait_s=300)
            began.append("yes")
        return objective(values, steps)

    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=trials), SEARCH_SPACE), trial,
                                 steps=10, default_values=None,
                                 directory=os.path.join(directory, os.environ["KERASTUNER_TUNER_ID"]))
    search.search()
    if not tuner.is_chief():
        best = search.oracle.get_best_trials(1)
        print(json.dumps({"tuner_id": search.tuner_id, "ran": sorted(search.trial_seconds),
                          "best_trial": best[0].trial_id if best else None}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
