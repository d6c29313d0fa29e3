"""KerasTuner's distributed mode on this stack: a chief oracle and two trial workers as real
processes on localhost, configured only through KerasTuner's environment variables (what
README "Tuning on a cluster" tells a Kubeflow user to set)."""
import json
import os
import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT, free_ports

TRIALS = 6


@pytest.mark.slow
def test_two_workers_share_the_trials_of_one_chief_oracle(tmp_path):
    (port,) = free_ports(1)
    base = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "KERASTUNER_ORACLE_IP": "127.0.0.1",
            "KERASTUNER_ORACLE_PORT": str(port)}
    # Each worker's first trial waits until both began one (tests/support/tuner_worker.py): both take trials
    # however far apart their start-ups are.
    command = [sys.executable, str(PROJECT_ROOT / "tests" / "support" / "tuner_worker.py"), str(tmp_path),
               str(TRIALS), "2"]
    chief = subprocess.Popen(command, env={**base, "KERASTUNER_TUNER_ID": "chief"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    workers = [subprocess.Popen(command, env={**base, "KERASTUNER_TUNER_ID": f"tuner{i}"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        reports = []
        for worker in workers:
            out, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, err[-3000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
        _, err = chief.communicate(timeout=300)
        assert chief.returncode == 0, err[-3000:]
    finally:
        for process in (chief, *workers):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    ran = [trial for report in reports for trial in report["ran"]]
    assert len(ran) == len(set(ran)) == TRIALS            # every trial ran once, in one of the workers
    assert all(report["ran"] for report in reports)       # both workers took trials
    assert reports[0]["best_trial"] == reports[1]["best_trial"] is not None  # one oracle's view
