"""Failure injection keyed to progress (tests/support/pod_hold.py, ``TFJobApiServer.kill_at``): a pod is
killed at the point its own progress counter names, held there until then, so the kill means the same on
a machine that trains in milliseconds as on a loaded one (issue 47)."""
import pytest
from support import pod_hold
from support.k8s_tfjob_api import TFJobApiServer
from test_kubeflow_tfjob_launcher import TEMPLATE, _api, _fn_args

from pipeline.kubeflow.training.trainer_launcher import TFJobFailed, launch

SECRETS = {"creds": {"password": "s3cret"}}


def test_a_worker_faster_than_any_poll_is_killed_at_the_step_the_test_names(tmp_path):
    """Unheld, the worker's 100,000 counted steps end in well under the emulator's 0.2 s poll."""
    fn_args = _fn_args(tmp_path, run_fn="tests.support.pod_hold.racing_run_fn")
    fn_args.train_steps = 100_000
    with TFJobApiServer(tmp_path, secrets=SECRETS) as server:
        server.kill_at["worker-0"] = ("training steps", 3)
        with pytest.raises(TFJobFailed) as caught:
            launch(fn_args, _api(server, tmp_path), TEMPLATE, poll_s=0.2)
        (manifest,) = server.created
        log = server.log(f"{manifest['metadata']['name']}-worker-0")
    assert server.killed == {"worker-0": {"training steps": 3}}, log[-3000:]
    assert "pod_hold: reached 3 training steps; held here until the cluster kills this pod" in log
    assert "has failed because 1 Worker replica(s) failed" in caught.value.paragraph


def test_progress_points_and_the_trial_barrier_are_bounded(tmp_path):
    assert pod_hold.point("training steps=5") == ("training steps", 5)
    for bad in ("training steps", "training steps=0", "=3", "steps=x"):
        with pytest.raises(ValueError, match="no progress point"):
            pod_hold.point(bad)
    pod_hold.every_runner_began(str(tmp_path / "alone"), "tuner0", 1)  # the only runner: no wait
    with pytest.raises(RuntimeError, match=r"tuner0 waited 0 s for 2 trial runners.*\['tuner0'\]"):
        pod_hold.every_runner_began(str(tmp_path / "pair"), "tuner0", 2, wait_s=0.2, poll_s=0.05)
