"""Training under MirroredStrategy really runs 2 replicas (2 logical CPUs) and learns.

Runs in a subprocess: logical devices must be configured before TensorFlow initialises,
which the test session's own TensorFlow already has.
"""
import json
import subprocess
import sys
import textwrap

from conftest import PROJECT_ROOT

SCRIPT = textwrap.dedent("""
    import json, stackenv
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from sklearn.datasets import load_digits
    from models.common.distribution import make_strategy
    from models.cnn.model import build_cnn
    tf.keras.utils.set_random_seed(0)
    strategy = make_strategy("mirrored")
    digits = load_digits()
    # Standardised per pixel, as Transform feeds the CNN (models/cnn/preprocessing.py).
    x = ((digits.data - digits.data.mean(0)) / (digits.data.std(0) + 1e-6)).astype("float32")
    y = digits.target.astype("int64")
    global_batch = 32 * strategy.num_replicas_in_sync
    data = tf.data.Dataset.from_tensor_slices(({"image_xf": x}, y)).shuffle(2000, seed=0).repeat().batch(global_batch)
    with strategy.scope():
        model = build_cnn((8, 8, 1), 10)
    history = model.fit(data, epochs=4, steps_per_epoch=40, verbose=0)
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "strategy": type(strategy).__name__,
                      "variable_devices": sorted({v.device for v in model.trainable_variables[0].values}),
                      "loss": history.history["loss"]}))
""")


def test_mirrored_strategy_runs_two_replicas_and_loss_decreases():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["strategy"] == "MirroredStrategy"
    assert report["replicas"] == 2
    assert len(report["variable_devices"]) == 2, report["variable_devices"]  # one copy per replica
    loss = report["loss"]
    assert loss[-1] < loss[0] * 0.7, loss
