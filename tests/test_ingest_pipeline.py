"""Ingestion inside the pipeline, through TFX's own driver and MLMD: spans, caching, offline compile.

The ExampleGen runs alone in a real BeamDagRunner pipeline (its FileBasedDriver resolves
``{SPAN}`` and fingerprints the input; MLMD decides the cache), so these stay quick; the
whole pipeline on the new path runs in tests/test_e2e_cnn.py and the Kubeflow contract test.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml
from PIL import Image
from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner
from tfx.orchestration.metadata import sqlite_metadata_connection_config
from tfx.orchestration.pipeline import Pipeline

from components.data_facts import facts_of
from components.image_example_gen import image_example_gen
from pipeline.config import PipelineConfig
from pipeline.kubeflow.compile import compile_pipeline, dataset_for_cluster
from pipeline.results import mlmd


def _images(root: Path, classes: dict[str, int], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    for cls, count in classes.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).save(root / cls / f"{i}.png")
    return root


def _ingest(data: Path, out: Path, **kwargs):
    """Run a one-node pipeline; returns (execution, facts, span) of its ExampleGen."""
    component = image_example_gen(str(data), image_size=4, channels=1, train_buckets=4, eval_buckets=1,
                                  split_feature="example_id", **kwargs).with_id("ImportExampleGen")
    metadata = str(out / "metadata.sqlite")
    BeamDagRunner().run(Pipeline(
        pipeline_name="ingest", pipeline_root=str(out / "root"), components=[component], enable_cache=True,
        metadata_connection_config=sqlite_metadata_connection_config(metadata)))
    execution = mlmd.latest_node_execution(mlmd.open_store(mlmd.sqlite_config(metadata)), "ingest", "ImportExampleGen")
    examples = execution.outputs["examples"][0]
    return execution, facts_of(examples), examples.custom_properties["span"].int_value


def test_unchanged_folder_is_cached_and_a_changed_one_is_not(tmp_path: Path) -> None:
    data = _images(tmp_path / "pets", {"cat": 3, "dog": 3}, seed=0)
    first, facts, _ = _ingest(data, tmp_path)
    assert not first.cached and facts["num_examples"] == 6 and facts["classes"] == ["cat", "dog"]
    again, _, _ = _ingest(data, tmp_path)
    assert again.cached, "an unchanged folder must be a cache hit"
    time.sleep(1.1)  # TFX fingerprints mtimes to the second
    _images(data, {"bird": 2}, seed=1)
    changed, facts, _ = _ingest(data, tmp_path)
    assert not changed.cached and facts["classes"] == ["bird", "cat", "dog"] and facts["num_examples"] == 8
    # An image replaced in place, deep in a class folder: the folder's own mtime does not change.
    (data / "cat" / "deep").mkdir()
    for folder in (data / "cat", data / "cat" / "deep"):
        os.utime(folder, (1, 1))
    _ingest(data, tmp_path)
    Image.new("RGB", (6, 6), (9, 9, 9)).save(data / "cat" / "deep" / "x.png")
    for folder in (data / "cat", data / "cat" / "deep"):
        os.utime(folder, (1, 1))  # what TFX's own fingerprint stats is unchanged
    edited, facts, _ = _ingest(data, tmp_path)
    assert not edited.cached and facts["num_examples"] == 9


def test_newest_span_by_default_and_an_older_one_on_request(tmp_path: Path) -> None:
    data = tmp_path / "pets"
    _images(data / "span-1", {"cat": 2, "dog": 2}, seed=0)
    _images(data / "span-2", {"cat": 3, "dog": 3, "emu": 1}, seed=1)
    _, newest, span = _ingest(data, tmp_path / "a", span_pattern="span-{SPAN}")
    assert span == 2 and newest["num_examples"] == 7 and "emu" in newest["classes"]
    _, older, span = _ingest(data, tmp_path / "b", span_pattern="span-{SPAN}", spans=(1, 1))
    assert span == 1 and older["num_examples"] == 4 and older["classes"] == ["cat", "dog"]


@pytest.mark.parametrize("model", ["cnn", "seq2seq"])
def test_compile_with_a_bucket_reads_nothing(model: str, tmp_path: Path, monkeypatch) -> None:
    """The spec carries the URI; no file system call ever names the data (there is no network here)."""
    touched = []

    def guarded(original):
        def call(*args, **kwargs):
            if any("gs://bucket/x" in str(a) for a in args):
                touched.append(args)
                raise AssertionError(f"compile touched the data: {args}")
            return original(*args, **kwargs)
        return call

    for name in ("exists", "glob", "isdir", "listdir", "GFile", "stat", "walk"):
        monkeypatch.setattr(tf.io.gfile, name, guarded(getattr(tf.io.gfile, name)))
    config = PipelineConfig(model=model, data="gs://bucket/x", output_dir="gs://bucket/root", train_steps=5)
    dataset = dataset_for_cluster(config, prepare_locally=guarded(lambda *a: pytest.fail("prepared")))
    assert dataset is None
    package = compile_pipeline(config, dataset, "img:1", str(tmp_path / "p.yaml"))
    assert not touched
    with open(package) as handle:
        spec = yaml.safe_load(handle)
    parameters = spec["root"]["dag"]["tasks"]["ImportExampleGen"]["inputs"]["parameters"]
    # --data is a runtime parameter (pipeline/kubeflow/runtime_parameters.py): the ExampleGen reads the root's
    # `data` parameter, whose default is the URI compile was given.
    assert parameters["input_base"] == {"componentInputParameter": "data"}
    assert spec["root"]["inputDefinitions"]["parameters"]["data"]["defaultValue"] == "gs://bucket/x"
    executor = json.dumps(spec["deploymentSpec"]["executors"]["ImportExampleGen_executor"])
    assert "components.image_example_gen." in executor or "components.text_example_gen." in executor
    # The data-dependent settings are slots the steps fill from the ExampleGen's facts.
    trainer = spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    assert json.loads(trainer["eval_args"]["runtimeValue"]["constant"]).get("num_steps", 0) == 0
