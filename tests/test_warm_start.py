"""Warm start (models/common/warm_start.py): weights come from the earlier export, or a fresh start says why.

The CNN side runs on a real export (the family's own ``export_serving_model`` over a real
Transform output); the seq2seq side checks the subclassed model, which Keras cannot clone.
The two-run pipeline check (Resolver -> Trainer.base_model -> summary) reuses the session's
two-run fixture (tests/support/pipeline_runs.py), whose second run asks for --warm-start.
"""
import json

import numpy as np
import pytest
import tensorflow as tf
from support.pipeline_runs import PIPELINE_NAME, cnn_run_with_baseline  # noqa: F401 (fixture)

from models.cnn import export, features
from models.cnn.hparams import CnnHyperparameters
from models.cnn.model import build_cnn
from models.common.warm_start import WarmStarter, read_record, write_record

SHAPE = (8, 8, 1)


@pytest.fixture(scope="module")
def trained_export(cnn_transform, tmp_path_factory):
    """A CNN trained a little on real transformed digits, exported as the family exports it."""
    tft_output, rows = cnn_transform
    x = np.stack([r[features.IMAGE_XF] for r in rows]).astype("float32")
    y = np.array([r[features.LABEL_XF] for r in rows]).reshape(-1)
    classes = [v.decode() for v in tft_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    tf.keras.utils.set_random_seed(1)
    model = build_cnn(SHAPE, len(classes))
    model.fit({features.IMAGE_XF: x}, y, epochs=3, batch_size=32, verbose=0)
    target = str(tmp_path_factory.mktemp("served") / "Format-Serving")
    export.export_serving_model(model, tft_output, target, SHAPE)
    identity = {"family": "cnn", "image_shape": list(SHAPE), "classes": classes, "base_model": ""}
    write_record(target, identity, WarmStarter(False, None, identity).decision)
    return target, identity, model.get_weights(), x, y


def _equal(left, right) -> bool:
    return len(left) == len(right) and all(np.array_equal(a, b) for a, b in zip(left, right))


def test_warm_start_restores_the_exported_weights_and_starts_at_a_lower_loss(trained_export):
    target, identity, weights, x, y = trained_export
    notes = []
    tf.keras.utils.set_random_seed(2)
    warm = WarmStarter(True, target, identity, notes.append)
    model = warm.build(lambda: build_cnn(SHAPE, 10))
    assert _equal(model.get_weights(), weights)
    assert warm.decision.source == target and notes == [f"Warm start: from {target}"]
    tf.keras.utils.set_random_seed(2)
    cold = build_cnn(SHAPE, 10)
    assert not _equal(cold.get_weights(), weights)
    warm_loss = model.evaluate({features.IMAGE_XF: x}, y, verbose=0)[0]
    cold_loss = cold.evaluate({features.IMAGE_XF: x}, y, verbose=0)[0]
    assert warm_loss < cold_loss
    # A second build (the class-weight trial) starts from the same weights, decided once.
    assert _equal(warm.build(lambda: build_cnn(SHAPE, 10)).get_weights(), weights) and len(notes) == 1
    # The optimizer starts fresh: only weights were carried over.
    assert int(model.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize("change,reason", [
    ({"classes": ["cat", "dog"] + [str(i) for i in range(8)]}, "its classes differs"),
    ({"family": "seq2seq"}, "it is a 'cnn' model, this run trains 'seq2seq'"),
    ({"image_shape": [16, 16, 1]}, "its image_shape differs"),
])
def test_another_identity_falls_back_to_a_fresh_start(trained_export, change, reason):
    target, identity, weights, _, _ = trained_export
    notes = []
    tf.keras.utils.set_random_seed(3)
    model = WarmStarter(True, target, {**identity, **change}, notes.append).build(lambda: build_cnn(SHAPE, 10))
    tf.keras.utils.set_random_seed(3)
    assert _equal(model.get_weights(), build_cnn(SHAPE, 10).get_weights())  # exactly a cold start
    assert len(notes) == 1 and notes[0].startswith("Warm start: trained from scratch") and reason in notes[0]


def test_weights_of_another_shape_fall_back_with_the_variable_named(trained_export):
    target, identity, weights, _, _ = trained_export
    warm = WarmStarter(True, target, identity, lambda _: None)
    model = warm.build(lambda: build_cnn(SHAPE, 10, hparams=CnnHyperparameters(filters=8)))
    assert warm.decision.source is None and "do not fit" in warm.decision.note
    assert "shape" in warm.decision.note and not _equal(model.get_weights(), weights)


def test_an_export_without_a_record_and_no_base_model_start_fresh(tmp_path):
    notes = []
    WarmStarter(True, None, {"family": "cnn"}, notes.append).build(lambda: build_cnn(SHAPE, 3))
    assert notes == ["Warm start: trained from scratch, no blessed model of this pipeline yet"]
    model = build_cnn(SHAPE, 3)
    tf.saved_model.save(model, str(tmp_path / "old"))
    warm = WarmStarter(True, str(tmp_path / "old"), {"family": "cnn"}, lambda _: None)
    warm.build(lambda: build_cnn(SHAPE, 3))
    assert warm.decision.source is None and "records no warm-start identity" in warm.decision.note
    assert read_record(str(tmp_path / "old")) is None


def test_not_requested_ignores_a_base_model(trained_export):
    target, identity, weights, _, _ = trained_export
    warm = WarmStarter(False, target, identity, lambda _: None)
    assert not _equal(warm.build(lambda: build_cnn(SHAPE, 10)).get_weights(), weights)
    assert warm.decision.to_dict() == {"requested": False, "source": None, "note": ""}


def test_seq2seq_subclassed_model_warm_starts(tmp_path):
    from models.seq2seq.model import build_seq2seq

    def build():
        return build_seq2seq(30, 6, 3, embedding_dim=8, units=8)

    tf.keras.utils.set_random_seed(4)
    served = build()
    identity = {"family": "seq2seq", "vocabulary_size": 30, "vocabulary_sha256": "abc"}
    served.save_weights(str(tmp_path / "s" / "variables" / "variables"))  # the SavedModel's checkpoint, untraced
    write_record(str(tmp_path / "s"), identity, WarmStarter(False, None, identity).decision)
    warm = WarmStarter(True, str(tmp_path / "s"), identity, lambda _: None)
    assert _equal(warm.build(build).get_weights(), served.get_weights())
    other = WarmStarter(True, str(tmp_path / "s"), {**identity, "vocabulary_sha256": "def"}, lambda _: None)
    assert not _equal(other.build(build).get_weights(), served.get_weights())
    assert "vocabulary_sha256 differs" in other.decision.note


def test_second_pipeline_run_warm_starts_from_the_first_blessed_model(cnn_run_with_baseline):
    """Resolver -> Trainer.base_model -> run_fn, read back through MLMD (shared two-run fixture)."""
    from pipeline import graph
    from pipeline.results import mlmd, warm_start

    store = mlmd.open_output_store(str(cnn_run_with_baseline))
    first, second = mlmd.node_executions(store, PIPELINE_NAME, graph.TRAINER)[-2:]
    first_model = mlmd.artifacts_by_key(store, first.id)["model"][0]
    inputs = mlmd.artifacts_by_key(store, second.id, mlmd.INPUTS)
    assert [a.id for a in inputs["base_model"]] == [first_model.id]
    second_model = mlmd.artifacts_by_key(store, second.id)["model"][0]
    record = read_record(second_model.uri + "/Format-Serving")
    assert record["warm_start"] == {"requested": True, "source": first_model.uri + "/Format-Serving",
                                    "note": "weights restored"}
    line = warm_start.summary_line(second_model.uri, store)
    assert line.startswith("Warm start: yes, from the latest blessed model (served version ")
    assert read_record(first_model.uri + "/Format-Serving")["warm_start"]["requested"] is False


@pytest.mark.parametrize("warm", [True, False])
def test_graph_feeds_the_latest_blessed_model_to_trainer_base_model_only_when_asked(digits_dataset, tmp_path, warm):
    from pipeline import graph
    from pipeline.config import PipelineConfig
    from pipeline.warm_start import RESOLVER

    config = PipelineConfig(model="cnn", output_dir=str(tmp_path), warm_start=warm)
    nodes = {node.id: node for node in graph.create_pipeline(config, digits_dataset).components}
    trainer = nodes[graph.TRAINER]
    assert (RESOLVER in nodes) is warm
    assert ("base_model" in trainer.inputs) is warm
    if warm:
        assert trainer.inputs["base_model"].producer_component_id == RESOLVER
        assert nodes[RESOLVER].exec_properties["resolver_class"].__name__ == "LatestBlessedModelStrategy"
    assert json.loads(trainer.exec_properties["custom_config"])["training"]["warm_start"] is warm
