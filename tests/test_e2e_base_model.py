"""--base-model end to end under real Beam/TFX: a feature extractor this test builds (nothing
downloads), a new head trained on it, ONE exported SavedModel served through the TF Serving
REST emulation, and the base model named in the training record."""
import base64
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_cli
from support.tf_serving_rest import predict

pytestmark = pytest.mark.e2e


def test_base_model_run_end_to_end_and_served(tmp_path, digits_examples):
    extractor = str(tmp_path / "extractor")
    tf.saved_model.save(tf.keras.Sequential([
        tf.keras.Input((16, 16, 3)), tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D()]), extractor)
    output = tmp_path / "out"
    result = run_cli("run", "--output", output, "--base-model", extractor, "--train-steps", "20",
                     "--min-accuracy", "0", "--gate-margin", "-1", timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    assert "Blessed: yes" in result.stdout
    base = output / "serving" / "cnn"
    version = base / sorted(v for v in os.listdir(base) if v.isdigit())[-1]
    training = json.loads((version / "assets.extra" / "training.json").read_text())
    assert training["base_model"]["handle"] == extractor and training["base_model"]["features"] == 8

    import shutil
    shutil.rmtree(extractor)  # serving needs nothing but the exported model
    model = tf.saved_model.load(str(version))
    rows = digits_examples[:3]
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(int64_list=tf.train.Int64List(value=r["image"]))})).SerializeToString()
        for r in rows]
    answer = predict(model, {"instances": [{"b64": base64.b64encode(e).decode()} for e in examples]})
    assert len(answer["predictions"]) == 3
    assert all(abs(sum(p["probabilities"]) - 1) < 1e-4 for p in answer["predictions"])
    images = np.stack([r["image"] for r in rows]).reshape(-1, 8, 8, 1).tolist()
    again = predict(model, {"signature_name": "predict_image", "instances": images})
    # Probabilities, not argmax: a 20-step head can leave two classes within float rounding.
    np.testing.assert_allclose([p["probabilities"] for p in again["predictions"]],
                               [p["probabilities"] for p in answer["predictions"]], atol=1e-5)
