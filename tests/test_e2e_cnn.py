"""The whole CNN pipeline under real Beam, TFX and MLMD, driven through the CLI.

One small run (few training steps) is shared by the tests in this module; a second run
on the same output directory must be served from cache.
"""
import base64
import html
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_cli
from PIL import Image
from support.tf_serving_rest import predict

from pipeline import graph
from pipeline.config import PipelineConfig
from pipeline.results import mlmd

pytestmark = pytest.mark.e2e

ALL_NODES = {graph.EXAMPLE_GEN, graph.STATISTICS_GEN, graph.SCHEMA_GEN, graph.EXAMPLE_VALIDATOR,
             graph.TRANSFORM, graph.TRAINER, graph.EVALUATOR, graph.PUSHER}
# The default gate: the model must beat the logistic-regression reference by 0.01 (60 steps and the
# kernel head do on the digits; tests/test_e2e_default_gate.py has the refused case). Kept at the default
# because test_summary_reports_metrics_blessing_and_push checks the default gate's lines. Its margin, measured
# for issue 58 with --seed 42, 1 and 2: 0.9942 (2 errors in 342) against a bar of 0.9808 (6 allowed) every
# time, the kernel head (fitted in closed form) deciding: not a coin toss.
RUN_ARGS = ("--train-steps", "60")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("cnn-e2e")
    result = run_cli("run", "--model", "cnn", "--output", output, *RUN_ARGS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    config = PipelineConfig(model="cnn", output_dir=str(output))
    store = mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
    return config, result, mlmd.latest_run(store, config.pipeline_name)


def test_every_component_ran_and_wrote_its_artifacts(first_run):
    _, result, run = first_run
    assert set(run) == ALL_NODES
    for node_id, execution in run.items():
        assert execution.state == "COMPLETE", (node_id, execution.state)
        for key, artifacts in execution.outputs.items():
            for artifact in artifacts:
                assert tf.io.gfile.exists(artifact.uri), (node_id, key, artifact.uri)
    for node_id in ALL_NODES:
        assert f"▶ {node_id}" in result.stderr and f"✓ {node_id} done" in result.stderr


def test_examples_are_deflated_at_the_fastest_level(first_run):
    # components/gzip_records.py: the ExampleGen's TFRecords at zlib level 1, which a gzip header records in
    # its XFL byte as 4 (RFC 1952, 2.3.1; Beam's default level 6 writes 0). Transform's, of the text family:
    # tests/test_e2e_text_debian.py.
    _, _, run = first_run
    written = [artifact.uri for artifact in run["ImportExampleGen"].outputs["examples"]]
    files = [path for uri in written for path in tf.io.gfile.glob(f"{uri}/Split-*/*.gz")]
    assert len(files) >= 2, written
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as f:
            assert f.read(10)[8] == 4, path


def test_transform_only_analyses_and_the_trainer_reads_the_example_gens_examples(first_run):
    # The CNN family reads raw examples through the transform graph (models/common/raw_examples.py): Transform
    # writes no transformed examples, and the Trainer's examples are the ExampleGen's.
    config, _, run = first_run
    assert not run["Transform"].outputs.get("transformed_examples"), run["Transform"].outputs.keys()
    assert run["Transform"].outputs["transform_graph"]
    store = mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
    trainer_inputs = mlmd.artifacts_by_key(store, run["Trainer"].execution.id, mlmd.INPUTS)
    assert [a.uri for a in trainer_inputs["examples"]] == [a.uri for a in run["ImportExampleGen"].outputs["examples"]]


def test_summary_reports_metrics_blessing_and_push(first_run):
    config, result, _ = first_run
    out = result.stdout
    assert "Components: 8 ran, 0 cached" in out
    assert "Examples: 1797 in -> " in out
    assert "Accuracy (overall): " in out and "Worst slice: " in out
    assert "Blessed: yes" in out
    assert "Reference predictors (accuracy on the same eval split): " in out and "majority 0." in out
    assert "Training: kept step " in out
    logistic = float(re.search(r"logistic_regression (\d\.\d+)", out).group(1))
    overall = float(re.search(r"Accuracy \(overall\): (\d\.\d+)", out).group(1))
    # On these digits the margin sets the bar: half the reference's error, and the score whose interval on
    # the eval examples clears it, are both higher (models/common/references.py `demand`).
    count = float(re.search(r"on (\d+) eval examples", out).group(1))
    assert 0.01 <= (1 - logistic) / 2 and 0.01 <= 1.96 * (logistic * (1 - logistic) / count) ** 0.5
    bar = math.ceil((logistic + 0.01) * 1e4 - 1e-6) / 1e4  # printed rounded up
    # The verdict may carry the interval's note ("; within the noise of N eval examples, ...").
    assert (f"Gate: accuracy >= {bar:.4f} (logistic_regression {logistic:.4f} + margin 0.0100; "
            f"floor 0.0) -> passed ({overall:.4f}") in out
    assert "  Rule: The model must reach the gate reference plus the smaller of the margin 0.01 and 50% of " in out
    assert f"Blessed: yes (accuracy >= {bar:.4f}; no model was served before, so none to compare with)" in out
    assert f"Pushed: {_pushed_version_dir(config)}" in out


def test_evaluation_has_overall_class_and_brightness_slices(first_run):
    from pipeline.results.summary import slice_metrics

    _, _, run = first_run
    uri = run[graph.EVALUATOR].outputs["evaluation"][0].uri
    names = {m.slice_name for m in slice_metrics(uri, "sparse_categorical_accuracy")}
    assert "overall" in names
    assert {f"label={d}" for d in range(10)} <= names
    assert {"brightness=dark", "brightness=medium", "brightness=bright"} <= names
    blessing = run[graph.EVALUATOR].outputs["blessing"][0]
    assert blessing.custom_properties["blessed"].int_value == 1


def _pushed_version_dir(config):
    versions = [v for v in os.listdir(config.serving_model_dir) if v.isdigit()]
    assert len(versions) == 1, versions
    return os.path.join(config.serving_model_dir, versions[0])


def test_pushed_model_answers_tf_serving_rest_requests(first_run, digits_examples):
    config, _, _ = first_run
    model = tf.saved_model.load(_pushed_version_dir(config))
    rows = digits_examples[:4]
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(int64_list=tf.train.Int64List(value=r["image"]))})).SerializeToString()
        for r in rows]
    by_example = predict(model, {"instances": [{"b64": base64.b64encode(e).decode()} for e in examples]})
    images = np.stack([r["image"] for r in rows]).reshape(-1, 8, 8, 1).tolist()
    by_image = predict(model, {"signature_name": "predict_image", "instances": images})
    for answer in (by_example, by_image):
        assert len(answer["predictions"]) == 4
        for prediction in answer["predictions"]:
            assert len(prediction["probabilities"]) == 10
            assert abs(sum(prediction["probabilities"]) - 1) < 1e-4
            assert prediction["classes"] == str(prediction["class_ids"])  # digit classes are "0".."9"
    assert [p["class_ids"] for p in by_example["predictions"]] == [p["class_ids"] for p in by_image["predictions"]]


def test_predict_cli_classifies_image_files(first_run, digits_examples, tmp_path):
    config, _, _ = first_run
    paths = []
    for i, row in enumerate(digits_examples[:3]):
        path = tmp_path / f"digit{i}.png"
        Image.fromarray(np.asarray(row["image"], dtype=np.uint8).reshape(8, 8), mode="L").save(path)
        paths.append(path)
    result = run_cli("predict", "--model-dir", config.serving_model_dir, *paths)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    for path, line in zip(paths, lines):
        name, label, confidence = line.split("\t")
        assert name == str(path) and label in {str(d) for d in range(10)} and 0 < float(confidence) <= 1


def _eval_images(run):
    """The run's eval split as (float pixels [N, 8, 8, 1], label ids), read here from ExampleGen's output."""
    split = os.path.join(run[graph.EXAMPLE_GEN].outputs["examples"][0].uri, "Split-eval")
    records = tf.data.TFRecordDataset(tf.io.gfile.glob(os.path.join(split, "*")), compression_type="GZIP")
    examples = [tf.train.Example.FromString(r) for r in records.as_numpy_iterator()]
    images = np.array([e.features.feature["image"].int64_list.value for e in examples], np.float32)
    labels = np.array([e.features.feature["label_id"].int64_list.value[0] for e in examples])
    return images.reshape(-1, 8, 8, 1), labels


def _tflite_classes(path, images):
    interpreter = tf.lite.Interpreter(model_path=path)
    runner = interpreter.get_signature_runner("predict_image")
    return np.concatenate([runner(images=images[i:i + 64])["probabilities"].argmax(-1)
                           for i in range(0, len(images), 64)])


def test_pushed_version_has_tflite_models_that_agree_with_the_saved_model(first_run):
    config, result, run = first_run
    version = _pushed_version_dir(config)
    images, labels = _eval_images(run)
    assert len(labels) > 300  # the digits' eval split
    served = tf.saved_model.load(version).signatures["predict_image"]  # the extra files leave it loadable
    reference = served(images=tf.constant(images))["probabilities"].numpy().argmax(-1)
    float16 = os.path.join(version, "tflite", "model_float16.tflite")
    assert os.path.getsize(float16) < os.path.getsize(os.path.join(version, "variables",
                                                                   "variables.data-00000-of-00001"))
    assert np.mean(_tflite_classes(float16, images) == reference) >= 0.99
    int8 = os.path.join(version, "tflite", "model_int8.tflite")
    if os.path.exists(int8):  # written only when it agrees on 95 %: check that claim here
        assert np.mean(_tflite_classes(int8, images) == reference) >= 0.95
    else:
        assert "int8 NOT written (agrees with the SavedModel on " in result.stdout
    summary = next(line for line in result.stdout.splitlines() if line.startswith("TFLite"))
    assert f"on {len(labels)} eval examples" in summary and "float16 " in summary and "agrees 100.0%" in summary


def test_predict_tflite_cli_matches_the_saved_model(first_run, digits_examples, tmp_path):
    config, _, _ = first_run
    paths = []
    for i, row in enumerate(digits_examples[:3]):
        path = tmp_path / f"digit{i}.png"
        Image.fromarray(np.asarray(row["image"], dtype=np.uint8).reshape(8, 8), mode="L").save(path)
        paths.append(path)
    by_saved_model = run_cli("predict", "--model-dir", config.serving_model_dir, *paths)
    by_tflite = run_cli("predict", "--model-dir", config.serving_model_dir, "--tflite", *paths)
    assert by_tflite.returncode == 0, by_tflite.stderr[-3000:]
    expected = [line.split("\t") for line in by_saved_model.stdout.strip().splitlines()]
    got = [line.split("\t") for line in by_tflite.stdout.strip().splitlines()]
    assert [row[:2] for row in got] == [row[:2] for row in expected] and len(got) == 3
    assert all(abs(float(a[2]) - float(b[2])) <= 0.01 for a, b in zip(got, expected))


def test_model_card_beside_the_pushed_version_states_the_runs_metric(first_run):
    from pipeline.results.summary import slice_metrics

    config, _, run = first_run
    version = _pushed_version_dir(config)
    uri = run[graph.EVALUATOR].outputs["evaluation"][0].uri
    accuracy = next(m.value for m in slice_metrics(uri, "sparse_categorical_accuracy") if m.slice_name == "overall")
    with open(os.path.join(uri, "gate.json"), encoding="utf-8") as handle:
        threshold = json.load(handle)["threshold"]
    with open(os.path.join(version, "model_card.md"), encoding="utf-8") as handle:
        markdown = handle.read()
    with open(os.path.join(version, "model_card.html"), encoding="utf-8") as handle:
        page = handle.read()
    from components.model_card import markdown_text

    def mid_line(fragment: str) -> str:  # a fragment as the card's Markdown writes it inside a line
        return markdown_text("x" + fragment)[1:]

    for text, escape in ((markdown, mid_line), (page, html.escape)):
        assert f"version {os.path.basename(version)}" in text
        # The e2e run uses the default gate: the logistic reference + 0.01, recorded by the Evaluator in gate.json,
        # and the rule it follows in one sentence.
        shown = math.ceil(threshold * 1e4 - 1e-6) / 1e4  # printed rounded up
        assert escape(f"Blessed and pushed: accuracy {accuracy:.4f} passed accuracy >= {shown:.4f} "
                      "(logistic_regression ") in text and escape("+ margin 0.0100; floor 0.0)") in text
        assert escape("Rule: The model must reach the gate reference plus the smaller of the margin 0.01") in text
        assert "Examples: 1797; splits: eval " in text and "label=" in text
    assert f"{markdown_text('sparse_categorical_accuracy')} | {accuracy:.4f} |" in markdown
    assert f"<td>sparse_categorical_accuracy</td><td>{accuracy:.4f}</td>" in page
    assert markdown_text("model_float16.tflite") in markdown and "## Known limits" in markdown


def _latest_run(config):
    return mlmd.latest_run(mlmd.open_store(mlmd.sqlite_config(config.metadata_path)), config.pipeline_name)


def test_second_run_is_served_from_cache(first_run):
    """Same inputs: every component is reused; only the check against the pinned schema is new."""
    config, _, _ = first_run
    result = run_cli("run", "--model", "cnn", "--output", config.output_dir, *RUN_ARGS)
    assert result.returncode == 0, result.stderr[-5000:]
    run = _latest_run(config)
    assert set(run) == ALL_NODES | {graph.PINNED_SCHEMA}
    fresh = {n for n, e in run.items() if not e.cached}
    assert fresh == {graph.PINNED_SCHEMA, graph.EXAMPLE_VALIDATOR}, {n: e.state for n, e in run.items()}
    assert "Components: 2 ran, 7 cached" in result.stdout
    _pushed_version_dir(config)  # still exactly one version: an unchanged model is not pushed again

    third = run_cli("run", "--model", "cnn", "--output", config.output_dir, *RUN_ARGS)
    assert third.returncode == 0 and "Components: 0 ran, 9 cached" in third.stdout, third.stdout[-2000:]


def _digits_clean_for_eval_noise_for_training(root, per_class: int = 30) -> set[str]:
    """The digits as PNG folders, where each image the split sends to train is replaced by noise (its label
    kept): a model trained on them has learnt nothing, and the eval images are the clean digits. The split is
    computed with TFX's own partition function (tfx 1.16 base_example_gen_executor._PartitionFn: sha256 of the
    example_id feature, 4 train buckets to 1 eval, as PipelineConfig's defaults), not with this project's code.
    Returns the example ids of the clean (eval) images."""
    from sklearn.datasets import load_digits
    from tfx.components.example_gen.base_example_gen_executor import _PartitionFn
    from tfx.proto import example_gen_pb2

    split_config = example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)], partition_feature_name="example_id")
    digits, rng, clean, taken = load_digits(), np.random.default_rng(11), set(), {}
    for index, (image, target) in enumerate(zip(digits.images, digits.target)):
        if taken.get(target, 0) == per_class:
            continue
        taken[target] = taken.get(target, 0) + 1
        example_id = f"{target}/{index}.png"
        record = tf.train.Example(features=tf.train.Features(feature={"example_id": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[example_id.encode()]))}))
        evaluated = _PartitionFn(record, 2, [4, 5], split_config) == 1
        pixels = (image * 255 / 16).astype(np.uint8) if evaluated else rng.integers(0, 256, (8, 8), dtype=np.uint8)
        (root / str(target)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode="L").save(root / example_id)
        if evaluated:
            clean.add(example_id)
    return clean


def test_candidate_far_below_the_served_model_is_refused_by_max_regression(first_run, tmp_path):
    """A retrained model is evaluated against the served one, and --max-regression alone refuses it
    (--gate-margin -1 and --min-accuracy 0 leave no other bar): on new data whose training images are noise,
    the candidate is near chance while the served model still reads the clean eval digits. Nothing is pushed."""
    from pipeline.results.summary import slice_metrics

    config, _, _ = first_run
    served = _pushed_version_dir(config)
    clean = _digits_clean_for_eval_noise_for_training(tmp_path / "digits")
    result = run_cli("run", "--model", "cnn", "--output", config.output_dir, "--data", tmp_path / "digits",
                     "--image-size", "8", "--channels", "1", "--train-steps", "1", "--gate-margin", "-1",
                     "--min-accuracy", "0", "--max-regression", "0.1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    run = _latest_run(config)
    evaluated = {record.features.feature["example_id"].bytes_list.value[0].decode() for record in (
        tf.train.Example.FromString(raw.numpy()) for raw in tf.data.TFRecordDataset(tf.io.gfile.glob(
            run[graph.EXAMPLE_GEN].outputs["examples"][0].uri + "/Split-eval/*"), compression_type="GZIP"))}
    assert evaluated == clean  # the premise: the eval split is exactly the clean digits
    uri = run[graph.EVALUATOR].outputs["evaluation"][0].uri
    assert slice_metrics(uri, "sparse_categorical_accuracy", model="baseline"), "served model not used as baseline"
    assert run[graph.EVALUATOR].outputs["blessing"][0].custom_properties["blessed"].int_value == 0
    out = result.stdout
    candidate = float(re.search(r"^Accuracy \(overall\): (\d\.\d+)", out, re.MULTILINE).group(1))
    baseline = float(re.search(r"^Served model \(baseline\) on the same data: (\d\.\d+)", out, re.MULTILINE).group(1))
    assert candidate < baseline - 0.1, out[-3000:]
    assert f"Blessed: NO (accuracy >= 0.0000, at most 0.1 below the served model ({baseline:.4f}))" in out, \
        out[-3000:]
    reasons = re.findall(r"^  - (.+ fails .+)$", out, re.MULTILINE)  # (the advice lines follow, also "  - ")
    assert len(reasons) == 1, reasons
    diff = re.fullmatch(r"sparse_categorical_accuracy \(overall\) = (-\d\.\d+) fails the change limit vs\. the "
                        r"served model \(-0\.1\)", reasons[0])
    assert diff and float(diff.group(1)) == pytest.approx(candidate - baseline, abs=2e-4), reasons
    assert f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)" in out
    assert _pushed_version_dir(config) == served


@pytest.mark.slow  # a whole run again
def test_no_cache_reruns_every_component(first_run):
    config, _, _ = first_run
    result = run_cli("run", "--model", "cnn", "--output", config.output_dir, *RUN_ARGS, "--no-cache")
    assert result.returncode == 0, result.stderr[-5000:]
    run = _latest_run(config)
    assert set(run) == ALL_NODES | {graph.PINNED_SCHEMA}
    assert not [n for n, e in run.items() if e.cached], {n: e.state for n, e in run.items()}
    assert "Components: 9 ran, 0 cached" in result.stdout
