"""One training worker process: the CNN family's real ``run_fn`` under ``TF_CONFIG``.

``python tests/support/multi_worker_job.py JOB.json``; JOB.json holds the FnArgs fields. The test
starts one such process per worker (tests/test_multi_worker.py), as a TFJob starts pods.
"""
import json
import sys

import stackenv  # noqa: F401  (first: tf-keras before TensorFlow loads)
from stackenv.errors import ProjectError

from tfx.components.trainer.fn_args_utils import FnArgs

from models.cnn.trainer import run_fn


def main(path: str) -> int:
    with open(path) as f:
        job = json.load(f)
    try:
        run_fn(FnArgs(**job))
    except ProjectError as error:
        print(error.paragraph, file=sys.stderr)
        return error.exit_code
    print(json.dumps({"done": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
