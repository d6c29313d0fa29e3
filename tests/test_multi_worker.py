"""Multi-worker training for real: two worker processes, one TF_CONFIG cluster on localhost.

Each worker runs the CNN family's real ``run_fn`` (tests/support/multi_worker_job.py) on a split
transformed by real tft_beam; the chief alone exports to its serving dir, the other
worker's serving dir stays empty. A worker killed mid-run ends the other with the
WorkerFailure paragraph within a bounded time. Bad TF_CONFIGs are ConfigErrors naming it.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stackenv import progress

import numpy as np
import pytest
from conftest import DIGIT_FACTS, PROJECT_ROOT, free_ports, run_cli

JOB = PROJECT_ROOT / "tests" / "support" / "multi_worker_job.py"



def _start_workers(data, root: Path, train_steps: int, epochs: int, progress_dirs: bool = False):
    """Two worker processes; with ``progress_dirs``, each counts its training steps in root/progress-<index>
    (stackenv.progress), where the test reads how far it is."""
    from models.common.training import TrainingSettings

    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    settings = TrainingSettings(strategy="multi_worker", batch_size=16, learning_rate=3e-3, epochs=epochs)
    workers = []
    for index in range(2):
        job = dict(data, serving_model_dir=str(root / f"serving-{index}"), model_run_dir=str(root / f"run-{index}"),
                   transform_graph_path=data["transform_output"], train_steps=train_steps, eval_steps=2,
                   custom_config={**settings.to_custom_config(), **DIGIT_FACTS})
        path = root / f"job-{index}.json"
        path.write_text(json.dumps(job))
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                   PYTHONPATH=str(PROJECT_ROOT))
        if progress_dirs:
            env[progress.PROGRESS_DIR_ENV] = str(root / f"progress-{index}")
        workers.append(subprocess.Popen([sys.executable, str(JOB), str(path)], cwd=PROJECT_ROOT, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return workers


def _finish(workers, timeout):
    results = []
    for worker in workers:
        try:
            out, err = worker.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for w in workers:
                w.kill()
            raise
        results.append((worker.returncode, out, err))
    return results


def test_two_real_workers_train_a_few_steps_and_only_the_chief_exports(trainer_digits, tmp_path):
    """The CI-sized run: two worker processes form the TF_CONFIG cluster and take four steps together
    (each step is a collective all-reduce, so neither can finish alone); the chief alone writes a model.
    The slow test below trains longer and checks the model's answers."""
    import tensorflow as tf

    workers = _start_workers(trainer_digits, tmp_path, train_steps=4, epochs=1)
    results = _finish(workers, timeout=300)
    for code, out, err in results:
        assert code == 0, err[-4000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"done": True}
    chief, other = tmp_path / "serving-0", tmp_path / "serving-1"
    assert {"serving_default", "predict_image"} <= set(tf.saved_model.load(str(chief)).signatures)
    assert not other.exists() or not any(other.iterdir()), list(other.rglob("*"))


@pytest.mark.slow  # two training processes on 2 cores, 40 steps, and the model's answers checked
def test_multi_worker_training_chief_exports_a_model_that_serves(trainer_digits, digits_examples, tmp_path):
    import tensorflow as tf
    from support.tf_serving_rest import predict

    workers = _start_workers(trainer_digits, tmp_path, train_steps=40, epochs=1)
    results = _finish(workers, timeout=420)
    for code, _, err in results:
        assert code == 0, err[-4000:]
    chief, other = tmp_path / "serving-0", tmp_path / "serving-1"
    assert (chief / "saved_model.pb").exists()
    assert not other.exists() or not any(other.iterdir()), list(other.rglob("*"))
    # Keras' TensorBoard callback, too, keeps the chief's logs only.
    assert list((tmp_path / "run-0").rglob("events.out.tfevents.*"))
    assert not list((tmp_path / "run-1").rglob("events.out.tfevents.*"))

    model = tf.saved_model.load(str(chief))
    assert {"serving_default", "predict_image", "transform_features"} <= set(model.signatures)
    held_out = digits_examples[300:500]
    images = [np.asarray(r["image"], dtype=np.float32).reshape(8, 8, 1).tolist() for r in held_out]
    answer = predict(model, {"signature_name": "predict_image", "instances": images})
    predicted = [p["classes"] for p in answer["predictions"]]
    truth = [r["label"].decode() for r in held_out]
    accuracy = np.mean([p == t for p, t in zip(predicted, truth)])
    assert accuracy > 0.5, accuracy  # 10 classes: chance is 0.1


@pytest.mark.slow  # two training processes on 2 cores
def test_multi_worker_dead_peer_ends_the_other_with_a_paragraph(trainer_digits, tmp_path):
    workers = _start_workers(trainer_digits, tmp_path, train_steps=100_000, epochs=1, progress_dirs=True)
    deadline = time.monotonic() + 600  # a bound against a hang, not a speed assertion
    try:
        # The cluster trains: the killed worker counted 5 of its steps (each one an all-reduce with the other).
        while progress.read(str(tmp_path / "progress-1"))[0].get("training steps", 0) < 5:
            assert time.monotonic() < deadline, "the workers took no 5 training steps in 600 s"
            assert workers[0].poll() is None and workers[1].poll() is None, _finish(workers, 5)
            time.sleep(0.2)
        workers[1].kill()
        _, err = workers[0].communicate(timeout=120)  # bounded: the survivor times its peer out (heartbeats)
    finally:
        for w in workers:
            w.kill()
    assert workers[0].returncode not in (0, None)
    assert "TF_CONFIG" in err and "died or became unreachable" in err, err[-3000:]
    assert "nothing is pushed" in err
    serving = tmp_path / "serving-0"
    assert not serving.exists() or not any(serving.iterdir())


@pytest.mark.parametrize("tf_config, problem", [
    (None, "is not set"),
    ("{not json", "not valid JSON"),
    ('{"cluster": {}, "task": {"type": "worker", "index": 0}}', '"worker"'),
    ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}', "host:port"),
    ('{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}', "index 3"),
    ('{"cluster": {"worker": ["localhost:1"]}}', '"task"'),
])
def test_multi_worker_bad_tf_config_is_a_config_error(tf_config, problem):
    from stackenv.errors import ConfigError

    from models.common.multi_worker import read_tf_config

    with pytest.raises(ConfigError) as raised:
        read_tf_config({} if tf_config is None else {"TF_CONFIG": tf_config})
    assert raised.value.flag == "TF_CONFIG"
    assert problem in str(raised.value) and "--strategy mirrored" in str(raised.value)


def test_multi_worker_cli_without_tf_config_stops_before_tfx(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    result = run_cli("run", "--output", tmp_path / "out", "--strategy", "multi_worker", "--train-steps", "2",
                     env=env, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "TF_CONFIG" in result.stderr and "is not set" in result.stderr
    assert not (tmp_path / "out" / "tfx").exists()


def test_multi_worker_roles_from_tf_config():
    from models.common.multi_worker import read_tf_config

    worker = '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": %d}}'
    assert read_tf_config({"TF_CONFIG": worker % 0}).is_chief
    assert not read_tf_config({"TF_CONFIG": worker % 1}).is_chief
    with_chief = '{"cluster": {"chief": ["c:3"], "worker": ["a:1"]}, "task": {"type": "%s", "index": 0}}'
    assert read_tf_config({"TF_CONFIG": with_chief % "chief"}).is_chief
    place = read_tf_config({"TF_CONFIG": with_chief % "worker"})
    assert not place.is_chief and place.num_workers == 2
