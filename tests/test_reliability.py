"""Reliability of real pipeline processes: drift stops a run, interrupted runs resume, one run per dir."""
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import PROJECT_ROOT, run_cli
from PIL import Image
from support import pod_hold

from artifacts import serving_dir
from pipeline import graph
from pipeline.config import PipelineConfig
from pipeline.results import mlmd

pytestmark = pytest.mark.e2e


def _latest_run(output):
    config = PipelineConfig(model="cnn", output_dir=str(output))
    return mlmd.latest_run(mlmd.open_store(mlmd.sqlite_config(config.metadata_path)), config.pipeline_name)


def _digit_folder(root, classes):
    from sklearn.datasets import load_digits

    digits = load_digits()
    for i, (image, target) in enumerate(zip(digits.images, digits.target)):
        if target in classes:
            folder = root / str(target)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image * 255 / 16).astype(np.uint8), mode="L").save(folder / f"{i}.png")
    return root


FOLDER_ARGS = ("--image-size", "8", "--channels", "1", "--train-steps", "15", "--min-accuracy", "0.3",
               "--gate-margin", "-1")  # -1: the floor gates, not the reference predictors


def test_schema_drift_stops_the_run_before_training(tmp_path):
    source = _digit_folder(tmp_path / "images", {0, 1})
    output = tmp_path / "out"
    first = run_cli("run", "--data", source, "--output", output, *FOLDER_ARGS)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Schema pinned:" in first.stderr
    served = serving_dir.list_versions(str(output / "serving" / "cnn"))
    assert len(served) == 1

    _digit_folder(source, {2})  # a new class appears in the data
    drifted = run_cli("run", "--data", source, "--output", output, *FOLDER_ARGS)
    assert drifted.returncode == 1
    assert "Traceback" not in drifted.stderr
    assert "Component ExampleValidator failed" in drifted.stderr
    assert "feature 'label'" in drifted.stderr and 'unexpected value "2"' in drifted.stderr
    assert "Full report: " in drifted.stderr and "--accept-schema-change" in drifted.stderr
    run = _latest_run(output)
    assert graph.TRAINER not in run and graph.TRANSFORM not in run  # stopped before Transform/Trainer
    assert serving_dir.list_versions(str(output / "serving" / "cnn")) == served

    accepted = run_cli("run", "--data", source, "--output", output, "--accept-schema-change", *FOLDER_ARGS)
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "not comparable with the candidate" in accepted.stderr  # 3 classes vs the served 2
    assert len(serving_dir.list_versions(str(output / "serving" / "cnn"))) == 2


#: ``python -m pipeline run`` held in training (tests/support/pod_hold.py): once it took 5 training steps, it
#: waits there for the test's signal, so the signal lands in training however fast the machine trains.
HELD_RUN = [sys.executable, str(PROJECT_ROOT / "tests" / "support" / "pod_hold.py"), "-m", "pipeline", "run"]
HELD_AT = "pod_hold: reached 5 training steps"


def _as_from_a_terminal() -> None:
    """SIGINT as a terminal's foreground command gets it: a suite started in the background of a shell (``make
    test &``, ``nohup``) runs with SIGINT ignored, a child inherits that, and its Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_and_kill_in_training(output, sig, args, env=None):
    log_path = output.parent / f"run-{sig.name}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([*HELD_RUN, "--output", str(output), *args], cwd=PROJECT_ROOT, stdout=log,
                                   stderr=subprocess.STDOUT, text=True, preexec_fn=_as_from_a_terminal,
                                   env={**(env or os.environ), pod_hold.HOLD_ENV: "training steps=5"})
    try:
        _wait_for_line(process, log_path, HELD_AT)
        process.send_signal(sig)
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, log_path.read_text()


def _wait_for_line(process, log_path, line: str, timeout: float = 900) -> None:
    """Until ``line`` is in the log (bounded: a hang's bound, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while line not in log_path.read_text():
        assert process.poll() is None, f"the run ended before {line!r}: {log_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {line!r} in {timeout} s: {log_path.read_text()[-3000:]}"
        time.sleep(0.2)


def test_killed_runs_resume_from_cache_and_leave_mlmd_consistent(tmp_path):
    output = tmp_path / "out"
    args = ("--train-steps", "1500", "--min-accuracy", "0.3", "--gate-margin", "-1")
    code, log = _start_and_kill_in_training(output, signal.SIGINT, args)
    assert code == 130, log[-3000:]
    assert "Interrupted." in log and "Traceback" not in log

    code, log = _start_and_kill_in_training(output, signal.SIGKILL, args)
    assert code == -signal.SIGKILL

    assert not os.path.exists(output / "serving") or not serving_dir.list_versions(str(output / "serving" / "cnn"))
    final = run_cli("run", "--output", output, *args)
    assert final.returncode == 0, final.stderr[-3000:]
    run = _latest_run(output)
    for node in (graph.EXAMPLE_GEN, graph.STATISTICS_GEN, graph.SCHEMA_GEN, graph.TRANSFORM):
        assert run[node].cached, (node, run[node].state)
    assert run[graph.TRAINER].state == "COMPLETE" and run[graph.PUSHER].state == "COMPLETE"
    assert len(serving_dir.list_versions(str(output / "serving" / "cnn"))) == 1
    assert not [n for n in os.listdir(output / "serving" / "cnn") if n.startswith(".incomplete")]


def test_second_run_on_the_same_output_fails_fast(tmp_path):
    output = tmp_path / "out"
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:  # held in training: it holds the lock until it is killed below
        first = subprocess.Popen([*HELD_RUN, "--output", str(output), "--train-steps", "3000"], cwd=PROJECT_ROOT,
                                 stdout=log, stderr=subprocess.STDOUT, text=True,
                                 env={**os.environ, pod_hold.HOLD_ENV: "training steps=5"})
    try:
        _wait_for_line(first, log_path, HELD_AT)
        # A second run that waited for the lock would wait for good (the first never ends): the bound ends it.
        second = run_cli("run", "--output", output, "--train-steps", "3000", timeout=300)
        assert second.returncode == 2
        assert "Another pipeline run is using" in second.stderr and str(output) in second.stderr
    finally:
        first.kill()
        first.wait()
    shutil.rmtree(output, ignore_errors=True)


def _lock_is_free(output) -> bool:
    import fcntl

    with open(output / ".run.lock") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def test_sigterm_stops_a_run_like_ctrl_c_and_no_run_leaves_temporary_files(tmp_path):
    """SIGTERM mid-training: exit 143, one line, lock released, nothing pushed, nothing left in
    TMPDIR; the next run names the stopped one, finishes, and leaves TMPDIR as it found it."""
    output, private_tmp = tmp_path / "out", tmp_path / "tmp"
    private_tmp.mkdir()
    (private_tmp / "kept-by-someone-else").write_text("x")
    before = sorted(os.listdir(private_tmp))
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    code, log = _start_and_kill_in_training(output, signal.SIGTERM, ("--train-steps", "3000"), env)
    assert code == 128 + signal.SIGTERM, log[-3000:]
    assert "Stopped by SIGTERM." in log and "Traceback" not in log, log[-3000:]
    assert _lock_is_free(output)
    serving = output / "serving" / "cnn"
    assert not serving.exists() or os.listdir(serving) == []  # nothing pushed, nothing staged
    assert sorted(os.listdir(private_tmp)) == before

    final = run_cli("run", "--output", output, "--train-steps", "15", "--min-accuracy", "0.3",
                    "--gate-margin", "-1", env=env)
    assert final.returncode == 0, final.stderr[-3000:]
    assert "was stopped by SIGTERM" in final.stderr, final.stderr[-3000:]
    assert len(serving_dir.list_versions(str(serving))) == 1
    assert sorted(os.listdir(private_tmp)) == before


def _beam_workers_started(process, timeout=300):
    """This run's descendants once a Beam SDK worker (multi_processing) is among them."""
    import psutil

    run = psutil.Process(process.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        children = run.children(recursive=True)
        commands = []
        for child in children:
            try:
                commands.append(" ".join(child.cmdline()))
            except psutil.Error:
                commands.append("")
        if any("sdk_worker_main" in c for c in commands):
            return children
        time.sleep(0.2)
    raise AssertionError(f"no Beam SDK worker started in {timeout} s")


@pytest.mark.parametrize("thread_name, error, printed", [
    ("read_grpc_client_inputs", "rpc", False), ("beam_control_read", "rpc", False),
    ("run_worker", "runtime", False), ("run_worker", "value", True), ("some_thread", "rpc", True),
])
def test_a_stop_drops_only_the_errors_of_beams_worker_threads(thread_name, error, printed, capsys, monkeypatch):
    """Once a stop has ended Beam's workers, the runner's threads that talked to them raise (the names and
    errors of Beam 2.59 and 2.77): the stop itself, so not printed. Any other thread's error still is."""
    import threading

    import grpc

    from pipeline.local import run_lock

    errors = {"rpc": grpc.RpcError, "runtime": RuntimeError, "value": ValueError}
    monkeypatch.setattr(threading, "excepthook", run_lock._drop_worker_exits)

    def fail():
        raise errors[error]("Worker subprocess exited with return code -15")

    thread = threading.Thread(target=fail, name=thread_name)
    thread.start()
    thread.join(timeout=30)
    assert ("Traceback" in capsys.readouterr().err) is printed


def test_sigterm_under_multi_processing_beam_ends_its_workers(tmp_path):
    """SIGTERM to the run alone (as `kill PID` sends it) while Beam's SDK worker processes run a
    component: exit 143 within the bound, no worker left behind, lock released, nothing pushed,
    and the next run says the last one was stopped. Before the fix the run hung in Beam's join of
    the worker threads and the workers outlived it."""
    import psutil

    output = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", "--output", str(output), "--beam-mode", "multi_processing",
         "--beam-workers", "2", "--train-steps", "15"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        workers = _beam_workers_started(process)
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=120)[0]  # a bound against the hang, not a speed assertion
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, log[-3000:]
    assert "Stopped by SIGTERM." in log and "Traceback" not in log, log[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=10)
    left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for orphan in left:
        orphan.kill()
    assert not left, [" ".join(p.cmdline()) for p in left]
    assert _lock_is_free(output)
    assert not (output / "serving" / "cnn").exists() or os.listdir(output / "serving" / "cnn") == []

    after = run_cli("run", "--output", output, "--data", tmp_path / "missing")  # fails fast, after the lock
    assert "was stopped by SIGTERM" in after.stderr, after.stderr[-3000:]
