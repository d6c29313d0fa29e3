"""One process of a distributed KerasTuner search (tests/test_tuning_parallel.py starts them).

``python tests/support/tuner_worker.py DIRECTORY TRIALS``; the role comes from KerasTuner's own
environment variables (KERASTUNER_TUNER_ID=chief serves the oracle; tuner0, tuner1, ...
run trials). A worker prints one JSON line: the trials it ran and the best trial it sees.
"""
import json
import os
import sys
import time

import stackenv  # noqa: F401  (first: tf_keras before TensorFlow)

from models.cnn.hparams import SEARCH_SPACE
from models.common import tuner
from models.common.search_space import TuningSettings


def objective(values, steps):
    time.sleep(0.5)  # long enough that both workers hold a trial at once
    return 1.0 - abs(values.get("filters", 16) - 32) / 100 - abs(values.get("dropout", 0.5) - 0.1)


def main(directory: str, trials: int) -> None:
    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=trials), SEARCH_SPACE), objective,
                                 steps=10, default_values=None,
                                 directory=os.path.join(directory, os.environ["KERASTUNER_TUNER_ID"]))
    search.search()
    if not tuner.is_chief():
        best = search.oracle.get_best_trials(1)
        print(json.dumps({"tuner_id": search.tuner_id, "ran": sorted(search.trial_seconds),
                          "best_trial": best[0].trial_id if best else None}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
