"""Beam's portable mode for real: the whole pipeline on PortableRunner (embedded job server)
with SDK workers from an external pool started by ``python -m pipeline beam-pool``.

The pool runs with a PATH whose ``python`` is not this project's interpreter (the bug this
guards: workers started with the system Python, and a run that hung). Bad pools end the
run in bounded time with the paragraph naming --environment_config.
"""
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from conftest import PROJECT_ROOT, free_ports, run_cli

from artifacts import serving_dir


def _portable_args(port):
    return ["--beam-arg=--runner=PortableRunner", "--beam-arg=--job_endpoint=embed",
            "--beam-arg=--environment_type=EXTERNAL", f"--beam-arg=--environment_config=localhost:{port}"]


def _wait_until_listening(pool: subprocess.Popen, port: int, timeout: float = 120) -> None:
    """Beam asks the pool for a worker once and fails at a refused connection, so a job started
    before the pool listens fails (it did, on a loaded machine): wait for the port, bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool.poll() is not None:
            pytest.fail(f"beam-pool exited with {pool.returncode} before listening: {pool.stdout.read()[-3000:]}")
        try:
            socket.create_connection(("localhost", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"beam-pool did not listen on port {port} within {timeout:.0f} s")


@pytest.fixture
def project_pool():
    """`python -m pipeline beam-pool` with a PATH that has no virtualenv on it."""
    [port] = free_ports()
    env = dict(os.environ, PATH="/usr/bin:/bin", PYTHONPATH=str(PROJECT_ROOT))
    pool = subprocess.Popen([sys.executable, "-m", "pipeline", "beam-pool", "--port", str(port)], cwd=PROJECT_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_until_listening(pool, port)
        yield port
    finally:
        pool.kill()
        pool.wait(timeout=30)


def test_pool_workers_run_the_projects_code_with_this_interpreter(project_pool, tmp_path):
    """The CI-sized check of the pool: a Beam job on PortableRunner (the README's options) whose
    workers the pool started decode four PNGs with the project's reader. The pixel sums are Pillow's,
    computed here; the workers must be this interpreter with this project on their path, not a
    process of the runner's own. The whole pipeline through the pool is the slow test below."""
    import json

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(5)
    images = {}
    for index in range(4):
        pixels = rng.integers(0, 256, size=(8, 8), dtype=np.uint8)
        path = tmp_path / f"digit-{index}.png"
        Image.fromarray(pixels, mode="L").save(path)
        images[path.name] = int(np.asarray(Image.open(path).convert("L"), dtype=np.int64).sum())
    job = PROJECT_ROOT / "tests" / "support" / "beam_pool_job.py"
    env = dict(os.environ, JOB_OUTPUT=str(tmp_path / "decoded.jsonl"), PYTHONPATH=str(PROJECT_ROOT))
    result = subprocess.run([sys.executable, str(job), str(project_pool), *map(str, sorted(tmp_path.glob("*.png")))],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    decoded = {row["file"]: row for row in report["decoded"]}
    assert {name: row["sum"] for name, row in decoded.items()} == images
    assert all(row["shape"] == [8, 8, 1] for row in decoded.values())
    for row in decoded.values():
        # Not resolved: the virtualenv's python is a link to the system's, and a worker of the system's is the bug.
        assert os.path.dirname(row["python"]) == os.path.dirname(sys.executable), row
        assert row["project"] == str(PROJECT_ROOT), row
        assert row["pid"] != report["runner_pid"]  # a worker process of the pool, not the runner


@pytest.mark.slow  # a whole pipeline through worker processes: minutes on 2 cores
def test_portable_runner_with_external_pool_runs_the_whole_pipeline(project_pool, tmp_path):
    # The subject is the runner, not the gate: --min-accuracy 0 and --gate-margin -1 leave no bar, so a 5-step
    # model is blessed and pushed on any machine (issue 58: the default gate's verdict on a few steps is not).
    result = run_cli("run", "--output", tmp_path / "out", "--train-steps", "5", "--min-accuracy", "0",
                     "--gate-margin", "-1", *_portable_args(project_pool), timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    counts = re.search(r"Examples: (\d+) in -> eval (\d+), train (\d+)", result.stdout)
    assert counts, result.stdout[-3000:]
    total, evaluation, train = map(int, counts.groups())
    assert total == 1797 and evaluation + train == total and evaluation > 0 and train > 0
    # The run is blessed (the gate above has no bar) and its model pushed: "Pushed: nothing" would also
    # contain "Pushed:".
    assert "Blessed: yes" in result.stdout, result.stdout[-3000:]
    (version,) = serving_dir.list_versions(str(tmp_path / "out" / "serving" / "cnn"))
    assert f"Pushed: {tmp_path / 'out' / 'serving' / 'cnn' / str(version)}" in result.stdout


def test_portable_pool_that_cannot_start_workers_fails_fast(tmp_path):
    """A raw worker_pool_main whose PATH has no `python` with apache_beam: the old hang."""
    [port] = free_ports()
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], env=dict(os.environ, PATH="/nonexistent"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result = run_cli("run", "--output", tmp_path / "out", *_portable_args(port), timeout=400)  # the hang's bound
    finally:
        pool.kill()
        pool.wait(timeout=30)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "--environment_config" in result.stderr and f"localhost:{port}" in result.stderr
    assert "beam-pool" in result.stderr
    assert not (tmp_path / "out" / "tfx").exists()


def test_portable_unreachable_pool_names_the_setting(tmp_path):
    [port] = free_ports()  # nothing listens
    result = run_cli("run", "--output", tmp_path / "out", *_portable_args(port), timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "--environment_config" in result.stderr and "did not answer" in result.stderr
    assert not (tmp_path / "out" / "tfx").exists()


def test_portable_pool_environment_puts_this_interpreter_first():
    from pipeline.local import beam_pool

    env = beam_pool.pool_environment({"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere"})
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(PROJECT_ROOT), "/elsewhere"]
    beam_args = [arg.removeprefix("--beam-arg=") for arg in _portable_args(5)]
    assert beam_pool.external_pool_address(beam_args) == "localhost:5"
    assert beam_pool.external_pool_address(["--runner=FlinkRunner", "--environment_type=EXTERNAL",
                                            "--environment_config=pool:5"]) is None  # the cluster's sidecar


def test_workers_are_told_the_name_the_pool_check_resolves():
    """Beam's runner hands every worker of an EXTERNAL pool its control server by this machine's name;
    the check must resolve the same name, on each Beam the stacks pin."""
    from apache_beam.runners.portability.fn_api_runner.worker_handlers import ExternalWorkerHandler

    from pipeline.local import beam_pool

    assert ExternalWorkerHandler.host_from_worker(None) == beam_pool.worker_host()


def test_a_machine_whose_name_does_not_resolve_is_named_before_the_pool_waits(project_pool, monkeypatch):
    """A chroot or container without the host's /etc/hosts: the pool starts workers that retry this
    machine's name forever (the Debian 13 root of CI once did, and the pool looked broken on Beam 2.77).
    The check names the host and the fix at once instead of waiting out the worker's start-up bound."""
    from stackenv.errors import ConfigError

    from pipeline.local import beam_pool

    monkeypatch.setattr(beam_pool, "worker_host", lambda: "tfx-project-test.invalid")  # RFC 6761: never resolves
    with pytest.raises(ConfigError) as raised:  # without the check: "did not connect within 30 s", after them
        beam_pool.check_pool(f"localhost:{project_pool}", start_timeout=30)
    message = str(raised.value)
    assert "'tfx-project-test.invalid'" in message and "/etc/hosts" in message and "--environment_config" in message
