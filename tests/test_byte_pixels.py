"""A CNN train split whose transformed pixels exceed the in-memory budget is held as its raw pixels, one byte
each, and transformed batch by batch (models/cnn/byte_pixels.py): the model must see exactly the values a
transformed split would have held, and train under the same regime (early stopping, runs of steps per call),
not streamed."""
import json
import logging

import numpy as np
import pytest
import tensorflow as tf
from conftest import DIGIT_FACTS, write_trainer_splits

from models.cnn import byte_pixels, features
from models.common import regime
from models.common.inputs import load_split


@pytest.fixture(scope="module")
def even_splits(cnn_transform, digits_examples, tmp_path_factory):
    """300 real digits as a Trainer's FnArgs sees them, 150 train and 150 eval, and the transform graph."""
    output, transformed = cnn_transform
    files = write_trainer_splits(digits_examples[:300], tmp_path_factory.mktemp("byte-pixels"), 150)
    return output, transformed, files


def _sizes(output) -> tuple[int, int]:
    """Bytes 150 examples hold: transformed (float32 pixels) and as raw bytes, each with an int64 label."""
    pixels = int(np.prod(output.raw_feature_spec()[features.IMAGE].shape))
    return 150 * (pixels * 4 + 8), 150 * (pixels + 8)


def test_byte_pixels_transformed_are_the_transformed_split_and_count_as_bytes(even_splits, digits_examples):
    output, transformed, files = even_splits
    spec, to_bytes = byte_pixels.reader(output)
    floats, held_bytes = _sizes(output)
    split = load_split(files["train_files"], spec, held_bytes, to_bytes)
    assert split is not None and byte_pixels.holds_bytes(split)
    assert split[byte_pixels.PIXELS].dtype == np.uint8 and held_bytes < floats
    assert load_split(files["train_files"], spec, held_bytes - 1, to_bytes) is None  # the budget counts bytes
    # The raw values themselves: the data contract's 0..255 pixels, one byte each.
    np.testing.assert_array_equal(split[byte_pixels.PIXELS],
                                  np.stack([np.asarray(row[features.IMAGE]) for row in digits_examples[:150]]))
    every = np.arange(150)
    rows = byte_pixels.rows(split, every, byte_pixels.to_inputs(output, (features.IMAGE_XF,)))
    expected = np.stack([np.asarray(row[features.IMAGE_XF]).reshape(-1) for row in transformed[:150]])
    np.testing.assert_allclose(rows[features.IMAGE_XF].reshape(150, -1), expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(rows[features.LABEL_XF].reshape(-1),
                                  [int(np.asarray(row[features.LABEL_XF]).reshape(-1)[0]) for row in transformed[:150]])


def test_regime_batches_of_bytes_are_the_batches_of_the_transformed_split(even_splits):
    output, _, files = even_splits
    from models.common import raw_examples

    spec, transform = raw_examples.reader(output, features.RAW_INPUTS, (features.IMAGE_XF, features.LABEL_XF))
    floats = load_split(files["train_files"], spec, None, transform)
    byte_spec, to_bytes = byte_pixels.reader(output)
    held = load_split(files["train_files"], byte_spec, None, to_bytes)
    labels = tf.constant(floats[features.LABEL_XF])
    indices = np.arange(150)[::2]
    as_floats = regime._dataset({features.IMAGE_XF: tf.constant(floats[features.IMAGE_XF])}, labels, indices,
                                16, True, seed=3)
    as_bytes = regime._dataset({byte_pixels.PIXELS: tf.constant(held[byte_pixels.PIXELS])}, labels, indices, 16,
                               True, seed=3, transform=byte_pixels.to_inputs(output, (features.IMAGE_XF,)))
    for (x_floats, y_floats), (x_bytes, y_bytes) in zip(as_floats.take(12), as_bytes.take(12)):
        assert set(x_bytes) == {features.IMAGE_XF}
        np.testing.assert_array_equal(y_bytes.numpy(), y_floats.numpy())
        np.testing.assert_allclose(x_bytes[features.IMAGE_XF].numpy(), x_floats[features.IMAGE_XF].numpy(),
                                   rtol=0, atol=1e-6)


def _run(files, output, tmp_path, name, facts=DIGIT_FACTS):
    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.cnn import trainer
    from models.common.training import TrainingSettings

    serving = tmp_path / name
    settings = TrainingSettings(batch_size=16)
    trainer.run_fn(FnArgs(**files, transform_output=output._transform_output_dir,  # noqa: SLF001
                          transform_graph_path=output._transform_output_dir,  # noqa: SLF001
                          serving_model_dir=str(serving), model_run_dir=str(tmp_path / f"{name}-run"),
                          train_steps=15 * 10, eval_steps=2,
                          custom_config={**settings.to_custom_config(), **facts}))
    assets = serving / "assets.extra"
    return (json.loads((assets / "training.json").read_text()), json.loads((assets / "references.json").read_text()))


def test_a_split_over_the_budget_as_floats_trains_in_memory_as_bytes(even_splits, tmp_path, monkeypatch, caplog):
    """The real run_fn, once with the regime's budget and once with a budget that holds both splits only as
    bytes: the same regime (early stopping, not the streamed fixed steps), the same training, the same
    reference scores (the same examples, transformed), and no kernel head, which needs every pixel at once.
    With the ExampleGen's counts in the data's facts, as a pipeline run hands them over, no transformed load
    is begun and abandoned first."""
    output, _, files = even_splits
    floats, held_bytes = _sizes(output)
    transformed_training, transformed_references = _run(files, output, tmp_path, "floats")

    monkeypatch.setattr(regime, "IN_MEMORY_BYTES", (floats + held_bytes) // 2)
    facts = {"data_facts": {**DIGIT_FACTS["data_facts"], "split_counts": {"train": 150, "eval": 150}}}
    with caplog.at_level(logging.INFO):
        training, written = _run(files, output, tmp_path, "bytes", facts)
    held_lines = [r.getMessage() for r in caplog.records if "held as raw pixels" in r.getMessage()]
    assert [line.split()[0] for line in held_lines] == ["Train", "Eval"], held_lines
    assert "as the train split" in held_lines[1]
    assert not [r for r in caplog.records if "exceed the in-memory budget (" in r.getMessage()
                and r.name == "models.common.inputs"]  # no transformed load abandoned at the budget

    assert training["regime"] == transformed_training["regime"] == "early_stopping"
    for key in ("best_epoch", "epochs_run", "steps_per_epoch", "holdout_examples", "step_budget"):
        assert training[key] == transformed_training[key], key
    np.testing.assert_allclose(training["curves"]["loss"], transformed_training["curves"]["loss"], rtol=1e-4)
    assert training["holdout_accuracy"] == pytest.approx(transformed_training["holdout_accuracy"], abs=1e-6)
    assert written["references"] == transformed_references["references"]
    assert written["eval_examples"] == written["eval_split_examples"] == 150
    assert training["kernel_head"]["kept"] is False and "raw pixels" in training["kernel_head"]["why"]
