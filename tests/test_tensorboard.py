"""``python -m pipeline tensorboard``: a real TensorBoard on the last run's Trainer logs, found through MLMD.

The shared second run (tests/support/pipeline_runs.py) trains with ``--profile``, so the newest
Trainer's logs hold per-epoch scalars and a profiler trace; the server is asked for both
over HTTP on a free local port, then stopped with Ctrl-C as a person stops it.
"""
import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import PROJECT_ROOT, run_cli
from support.jupyter_server import free_port
from support.pipeline_runs import cnn_run_with_baseline  # noqa: F401


def _get_json(url: str, process: subprocess.Popen, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"tensorboard exited with {process.returncode}: {process.stdout.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = answer.read()
                return json.loads(gzip.decompress(body) if answer.headers.get("Content-Encoding") == "gzip" else body)
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"No answer from {url} within {timeout} s")


@pytest.fixture(scope="module")
def served(cnn_run_with_baseline):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "tensorboard", "--output", str(cnn_run_with_baseline), "--port", str(port)],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    base = f"http://127.0.0.1:{port}/data/"
    try:
        answers = {"plugins": _get_json(base + "plugins_listing", process, timeout=120)}
        answers["scalars"] = _get_json(base + "plugin/scalars/tags", process, timeout=60)
        deadline = time.monotonic() + 60   # the profile plugin lists runs once it has scanned the logdir
        while time.monotonic() < deadline:
            answers["profile_runs"] = _get_json(base + "plugin/profile/runs", process, timeout=30)
            if answers["profile_runs"]:
                break
            time.sleep(2)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    return answers, process.returncode, output


@pytest.mark.e2e
def test_tensorboard_serves_epoch_scalars_and_the_profile(served, cnn_run_with_baseline):
    answers, returncode, output = served
    assert answers["plugins"]["scalars"]["enabled"], answers["plugins"]["scalars"]
    assert "profile" in answers["plugins"], sorted(answers["plugins"])   # tensorboard-plugin-profile loaded
    tags = {tag for run in answers["scalars"].values() for tag in run}
    assert {"epoch_loss", "epoch_accuracy"} <= tags, answers["scalars"]
    assert answers["profile_runs"], answers   # the --profile trace of the second run
    assert str(cnn_run_with_baseline) in output and "Profile tab" in output, output
    assert returncode == 0 and "TensorBoard stopped" in output, output


def test_tensorboard_without_a_run_says_what_to_do(tmp_path):
    result = run_cli("tensorboard", "--output", tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "No pipeline run in" in result.stderr and "python -m pipeline run" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_tensorboard_rejects_a_bad_port(tmp_path):
    result = run_cli("tensorboard", "--output", tmp_path, "--port", "70000", timeout=120)
    assert result.returncode == 2 and "--port" in result.stderr, result.stderr


def test_tensorboard_on_a_port_in_use_is_a_paragraph(tmp_path):
    """Real TensorBoard against a port this test holds open."""
    import socket

    from stackenv.errors import ConfigError

    from pipeline.tensorboard import start_server

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError) as raised:
            start_server(str(tmp_path), port, "127.0.0.1")
    assert raised.value.paragraph == (f"--port: 127.0.0.1:{port} is in use (another TensorBoard?). Pass another "
                                      "--port, or --port 0 for any free one.")
