"""Shared fixtures. ``stackenv`` first: it must set TF_USE_LEGACY_KERAS before TensorFlow loads."""
import functools
import os
import socket
import subprocess
import sys
from pathlib import Path

import stackenv  # noqa: F401

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ the suite split between two stacks
# `make test` runs the whole suite on the stack installed. CI runs it on both stacks within its time
# (.ci/run, docs/development.md "Two stacks"): with `--stack-share`, each stack runs the files both
# must (the families end to end with the default gate, the Kubeflow contract, the browser checks, the
# compat hooks, the worker pool) and its own share of the rest, so every test runs on at least one stack.
OLDER_STACK, NEWER_STACK = "tfx-1.16", "tfx-1.21"
BOTH_STACKS = frozenset({
    "test_e2e_cnn.py", "test_e2e_seq2seq.py", "test_e2e_default_gate.py", "test_e2e_text_one_file.py",
    "test_kubeflow_contract.py", "test_kubeflow_image.py",
    "test_report.py", "test_notebook_browser.py", "test_notebook_classic.py", "test_interactive.py",
    "test_compat.py", "test_setup_stack.py", "test_portable.py", "test_s3_filesystem.py",
    "test_serving_dir_object_store.py", "test_raw_examples.py",
})
#: The rest of the suite that CI runs on the newer stack; every other file runs on the older one.
NEWER_SHARE = frozenset({
    "test_e2e_tuning.py", "test_tuning_units.py", "test_tuning_parallel.py", "test_multi_worker.py",
    "test_data_service.py", "test_tensorboard.py", "test_tflite_export.py", "test_scoring.py", "test_serving_dir.py",
    "test_serving_dir_processes.py", "test_kubeflow_compile.py", "test_kubeflow_compile_flags.py",
    "test_kubeflow_deploy.py", "test_notebook.py", "test_e2e_base_model.py", "test_base_model.py",
    "test_warm_start.py", "test_cnn_model.py", "test_seq2seq_model.py", "test_seq2seq_blend.py", "test_kneser_ney.py",
    "test_kneser_ney_independent.py", "test_image_example_gen.py", "test_text_example_gen.py", "test_gzip_records.py",
    "test_evaluator_batch.py", "test_cnn_metrics.py", "test_pusher_metrics.py", "test_report_runs.py",
    "test_e2e_text_debian.py", "test_distribution.py", "test_kernel_head.py", "test_text_count_memory.py",
})


def pytest_addoption(parser):
    parser.addoption("--stack-share", action="store_true",
                     help="run only this stack's share of the suite (CI runs both stacks; see tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--stack-share"):
        return
    newer = stackenv.stack() == NEWER_STACK
    keep, drop = [], []
    for item in items:
        name = item.path.name
        mine = name in BOTH_STACKS or (name in NEWER_SHARE) == newer
        (keep if mine else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
#: What a Trainer step hands a CNN run_fn about the bundled 8x8 digits (components/data_facts.py).
DIGIT_FACTS = {"data_facts": {"image_shape": [8, 8, 1]}}


@pytest.fixture(scope="session")
def digits_dataset(tmp_path_factory):
    """The bundled digits, prepared once per session."""
    from data.images import prepare_image_dataset

    return prepare_image_dataset(None, tmp_path_factory.mktemp("digits-cache"))


@pytest.fixture(scope="session")
def digits_examples(digits_dataset):
    """A small, class-balanced list of raw digit examples as dicts (image, label)."""
    import numpy as np
    from support.records import read_examples

    from data import features

    rows = []
    for example in read_examples(os.path.join(digits_dataset.examples_dir, digits_dataset.file_pattern)):
        f = example.features.feature
        rows.append({
            features.IMAGE: np.array(f[features.IMAGE].int64_list.value, dtype=np.int64),
            features.LABEL: f[features.LABEL].bytes_list.value[0],
            features.LABEL_ID: f[features.LABEL_ID].int64_list.value[0],
        })
    return rows


def analyze_and_transform(preprocessing_fn, raw_spec, rows, out_dir: Path, custom_config=None):
    """Run a preprocessing_fn through real tft_beam; returns (TFTransformOutput, transformed rows)."""
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    fn = functools.partial(preprocessing_fn, custom_config=custom_config) if custom_config else preprocessing_fn
    metadata = dataset_metadata.DatasetMetadata.from_feature_spec(raw_spec)
    with tft_beam.Context(temp_dir=str(out_dir / "tmp"), force_tf_compat_v1=False):
        (transformed, _), transform_fn = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            fn, output_record_batches=False)
        _ = transform_fn | tft_beam.WriteTransformFn(str(out_dir / "transform"))
    # TFX's Transform also stores the raw schema there; serving signatures read it.
    metadata_io.write_metadata(metadata, str(out_dir / "transform" / tft.TFTransformOutput.RAW_METADATA_DIR))
    return tft.TFTransformOutput(str(out_dir / "transform")), list(transformed)


def transform_digits(dataset, examples, out_dir: Path, count: int, unit_image: bool):
    """CNN preprocessing analysed on the first ``count`` digits, ``unit_image`` as the family configures
    Transform (models/cnn/preprocessing.py UNIT_IMAGE): (TFTransformOutput, transformed rows)."""
    import tensorflow as tf

    from models.cnn import features
    from models.cnn.preprocessing import UNIT_IMAGE, preprocessing_fn

    size = int(__import__("numpy").prod(dataset.image_shape))
    raw_spec = {features.IMAGE: tf.io.FixedLenFeature([size], tf.int64),
                features.LABEL: tf.io.FixedLenFeature([], tf.string)}
    rows = [{k: r[k] for k in raw_spec} for r in examples[:count]]
    config = {"data_facts": {"classes": list(dataset.classes)}, **({UNIT_IMAGE: True} if unit_image else {})}
    return analyze_and_transform(preprocessing_fn, raw_spec, rows, out_dir, custom_config=config)


@pytest.fixture(scope="session")
def cnn_transform(tmp_path_factory, digits_dataset, digits_examples):
    """CNN preprocessing analysed on 300 digits: (TFTransformOutput, transformed rows). As a --base-model
    run configures it (both image features: the base-model tests read the [0, 1] one)."""
    return transform_digits(digits_dataset, digits_examples, tmp_path_factory.mktemp("cnn-tft"), 300,
                            unit_image=True)


def write_examples(rows, path) -> str:
    """Rows as a GZIP TFRecord file of tf.Examples, as ExampleGen and Transform write them (floats, ints or
    bytes per feature)."""
    import numpy as np
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for row in rows:
            feature = {}
            for key, value in row.items():
                value = np.asarray(value).reshape(-1)
                if value.dtype.kind == "f":
                    feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
                elif value.dtype.kind in "SO":
                    feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=list(value)))
                else:
                    feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


def write_trainer_splits(rows, examples: Path, eval_from: int) -> dict[str, list[str]]:
    """``rows`` as an Examples artifact's folder (Split-train, Split-eval from row ``eval_from``):
    ``train_files`` and ``eval_files`` as a Trainer's FnArgs holds them."""
    files = {}
    for split, part in (("train", rows[:eval_from]), ("eval", rows[eval_from:])):
        (examples / f"Split-{split}").mkdir(parents=True)
        files[f"{split}_files"] = [write_examples(part, examples / f"Split-{split}" / "data.gz")]
    return files


@pytest.fixture(scope="session")
def trainer_digits(cnn_transform, digits_examples, tmp_path_factory):
    """The 300 digits as a CNN Trainer's FnArgs sees them: ExampleGen's raw examples (the family reads them
    through the transform graph, models/common/raw_examples.py), 240 train, 60 eval, and that graph."""
    output, _ = cnn_transform
    examples = tmp_path_factory.mktemp("digits-examples")
    return {"transform_output": output._transform_output_dir,  # noqa: SLF001
            **write_trainer_splits(digits_examples[:300], examples, 240)}


def run_cli(*args, cwd=None, timeout=900, env=None):
    """Run ``python -m pipeline ...`` in a subprocess, as a user would; returns CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], cwd=cwd or PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def assert_paragraph(result, code: int, *phrases: str) -> None:
    """A CLI run that ended with exit ``code``, no traceback, and every one of ``phrases`` in its output."""
    output = result.stdout + result.stderr
    assert result.returncode == code, (result.returncode, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    for phrase in phrases:
        assert phrase in output, output[-3000:]


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct localhost ports free right now (held together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
