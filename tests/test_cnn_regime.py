"""The CNN's training regime: early stopping keeps the best weights, class weights are tried
on imbalanced data and kept only if better, augmentation acts only in training."""
import numpy as np
import pytest
import tensorflow as tf

from models.cnn import features
from models.cnn.hparams import CnnHyperparameters
from models.cnn.model import build_cnn
from models.cnn.shift_zoom import RandomShiftZoom
from models.common import regime
from models.common.callbacks import BestWeights


def _tiny_model():
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse")
    return model


def test_best_weights_are_restored_however_training_ends():
    model = _tiny_model()
    callback = BestWeights(patience=2, min_epochs=0)
    callback.set_model(model)
    snapshots = []
    for epoch, accuracy in enumerate([0.5, 0.9, 0.7, 0.6, 0.95]):
        model.set_weights([np.full((2, 1), epoch, np.float32), np.zeros(1, np.float32)])
        snapshots.append(model.get_weights())
        callback.on_epoch_end(epoch, {"val_accuracy": accuracy, "val_loss": 1.0})
        if model.stop_training:
            break
    assert callback.stopped_early and callback.epochs_run == 4  # no gain for 2 epochs after epoch 2
    callback.on_train_end()
    assert callback.best_epoch == 1
    np.testing.assert_array_equal(model.get_weights()[0], snapshots[1][0])


def test_min_epochs_holds_back_stopping_and_ties_prefer_lower_loss():
    model = _tiny_model()
    callback = BestWeights(patience=1, min_epochs=5)
    callback.set_model(model)
    for epoch, (accuracy, loss) in enumerate([(0.8, 0.5), (0.8, 0.4), (0.7, 0.9), (0.7, 0.9)]):
        callback.on_epoch_end(epoch, {"val_accuracy": accuracy, "val_loss": loss})
    assert not model.stop_training and callback.best_epoch == 1


def _checks(callback, accuracies, losses=None):
    """Feed ``callback`` one check per accuracy (with ``losses``, else a falling loss); the checks run."""
    model = _tiny_model()
    callback.set_model(model)
    for epoch, accuracy in enumerate(accuracies):
        loss = losses[epoch] if losses else 1.0 - 0.01 * epoch
        callback.on_epoch_end(epoch, {"val_accuracy": accuracy, "val_loss": loss})
        if model.stop_training:
            break
    return callback.epochs_run


def test_patience_waits_only_on_gains_the_held_out_part_can_resolve():
    # The held-out accuracies of a 200,000-digit run (4,995 held out, a check every 394 steps, patience one
    # check, three checks before stopping): 0.9928 -> 0.9930 is one example in 4,995, under the standard error
    # of 0.9928 there (sqrt(0.9928 * 0.0072 / 4995) = 0.0012), so it is no progress: stop after it, keeping it.
    curve = [0.965, 0.9822, 0.9928, 0.9930, 0.9938, 0.9924]
    sized = BestWeights(patience=1, min_epochs=3, holdout_examples=4995)
    assert _checks(sized, curve) == 4 and sized.stopped_early and sized.best_epoch == 3
    # Without a size every new best is progress (the rule for a monitor that is no accuracy on a count).
    unsized = BestWeights(patience=1, min_epochs=3)
    assert _checks(unsized, curve) == 6 and unsized.best_epoch == 4
    # The standard error shrinks with the held-out part: a gain of 0.01 at 0.80 is progress on 5,000 examples
    # (error 0.0057) but not on 300 (0.023); large gains are progress on either.
    for examples, stopped in ((300, True), (5000, False)):
        bound = BestWeights(patience=1, min_epochs=3, holdout_examples=examples)
        assert _checks(bound, [0.60, 0.70, 0.80, 0.81, 0.95]) == (4 if stopped else 5)
        assert bound.stopped_early == stopped and bound.best_epoch == (3 if stopped else 4)
    rising = BestWeights(patience=1, min_epochs=3, holdout_examples=300)
    assert _checks(rising, [0.60, 0.70, 0.80, 0.90, 0.95]) == 5 and not rising.stopped_early


def test_a_lower_loss_alone_keeps_its_weights_but_buys_no_patience():
    sized = BestWeights(patience=1, min_epochs=0, holdout_examples=5000)
    assert _checks(sized, [0.9, 0.95, 0.95, 0.95], losses=[0.5, 0.3, 0.2, 0.1]) == 3 and sized.best_epoch == 2
    unsized = BestWeights(patience=1, min_epochs=0)
    assert _checks(unsized, [0.9, 0.95, 0.95, 0.95], losses=[0.5, 0.3, 0.2, 0.1]) == 4 and unsized.best_epoch == 3


def test_holdout_never_takes_a_single_image_class():
    labels = np.array([0] * 10 + [1] * 10 + [2])
    fit, held = regime.holdout_split(labels, 0.2, seed=3)
    assert sorted(np.concatenate([fit, held])) == list(range(len(labels)))
    assert 20 in fit and 20 not in held
    assert np.bincount(labels[held], minlength=3).tolist() == [2, 2, 0]


def test_balanced_class_weights_and_imbalance():
    labels = np.array([0] * 30 + [1] * 10)
    weights = regime.balanced_class_weights(labels, 3)
    assert weights[0] == pytest.approx(40 / 60) and weights[1] == pytest.approx(2.0) and weights[2] == 1.0
    assert regime.is_imbalanced(labels) and not regime.is_imbalanced(np.array([0, 0, 1, 1]))


def test_class_weights_on_an_imbalanced_set_are_tried_and_the_better_kept():
    rng = np.random.RandomState(0)
    y = np.array([0] * 90 + [1] * 15)
    x = rng.normal(size=(len(y), 2)).astype(np.float32) + y[:, None] * 1.5
    built = []

    def build():
        model = tf.keras.Sequential([tf.keras.Input((2,), name="x"), tf.keras.layers.Dense(2, activation="softmax")])
        model.compile(tf.keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy", metrics=["accuracy"])
        built.append(model)
        return model

    model, report = regime.fit_with_holdout(
        build, {"x": x}, y, batch_size=16, min_steps=20, max_steps=40, patience_steps=10,
        holdout_fraction=0.2, class_weights="auto", num_classes=2, seed=0)
    trials = report.class_weight_trials
    assert set(trials) == {"with_class_weights", "without_class_weights"} and len(built) == 2
    kept = "with_class_weights" if report.class_weights else "without_class_weights"
    assert trials[kept] == max(trials.values()) and report.holdout_accuracy == trials[kept]
    assert model is built[1 if report.class_weights else 0]
    _, forced = regime.fit_with_holdout(
        build, {"x": x}, y, batch_size=16, min_steps=5, max_steps=5, patience_steps=5,
        holdout_fraction=0.2, class_weights="off", num_classes=2, seed=0)
    assert list(forced.class_weight_trials) == ["without_class_weights"] and not forced.class_weights


def test_augmentation_is_inactive_at_inference():
    hparams = CnnHyperparameters(augment=("translate", "zoom", "contrast", "flip"))
    model = build_cnn((16, 16, 3), 4, hparams=hparams)
    images = tf.constant(np.random.RandomState(1).normal(size=(6, 16 * 16 * 3)).astype(np.float32))
    first, second = model(images, training=False), model(images, training=False)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    augmented = model.get_layer(index=2)  # input, reshape, then translate+zoom as one layer
    assert isinstance(augmented, RandomShiftZoom)
    assert [type(layer) for layer in model.layers[3:5]] == [tf.keras.layers.RandomContrast, tf.keras.layers.RandomFlip]
    reshaped = tf.reshape(images, (6, 16, 16, 3))
    assert not np.allclose(augmented(reshaped, training=True).numpy(), reshaped.numpy())


@pytest.mark.parametrize("shape", [(8, 8, 1), (12, 20, 2), (64, 64, 4)])
def test_architecture_fits_sizes_and_channels(shape):
    model = build_cnn(shape, 3, hparams=CnnHyperparameters(filters=4))
    out = model.predict(np.zeros((2, int(np.prod(shape))), np.float32), verbose=0)
    assert out.shape == (2, 3)
    assert model.input.name.startswith(features.IMAGE_XF)


def test_hyperparameters_are_one_typed_object():
    hp = CnnHyperparameters.from_family({"image_shape": [8, 8, 1], "hparams": {"augment": "translate,zoom",
                                                                                 "dropout": 0.3}})
    assert hp.augment == ("translate", "zoom") and hp.dropout == 0.3
    with pytest.raises(ValueError, match="Unknown CNN hyperparameters"):
        CnnHyperparameters.from_family({"hparams": {"dropuot": 0.3}})
    with pytest.raises(ValueError, match="Unknown augmentation"):
        CnnHyperparameters(augment=("rotate",))


def test_auto_augmentation_depends_on_the_image_size():
    hp = CnnHyperparameters()
    assert hp.augmentations(8, 8) == () and hp.augmentations(32, 32) == ("translate", "zoom")
    assert CnnHyperparameters(augment=("flip",)).augmentations(8, 8) == ("flip",)
    with pytest.raises(ValueError, match="Unknown augmentation"):
        CnnHyperparameters(augment=("auto", "flip"))


def test_regime_datasets_are_not_autotuned_and_cover_the_arrays():
    # An autotuned iterator's destruction waits out its model thread's sleep (up to a minute), and Keras
    # leaves the training iterator to the garbage collector: the old from_tensor_slices pipeline stalled
    # the Trainer's export that way. The held-out part is read once, in order, the last batch partial.
    x = {"pixels": tf.constant(np.arange(20, dtype=np.float32).reshape(10, 2))}
    y = tf.range(10)
    held = regime._dataset(x, y, np.arange(10), 4, shuffle=False, seed=0)
    fit = regime._dataset(x, y, np.arange(10), 4, shuffle=True, seed=0)
    for data in (held, fit):
        assert data.options().autotune.enabled is False
    batches = list(held)
    assert [len(labels) for _, labels in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([features["pixels"][:, 0] for features, _ in batches]),
                                  x["pixels"][:, 0])
    first_pass = np.concatenate([labels.numpy() for _, labels in fit.take(5)])[:10]
    assert sorted(first_pass.tolist()) == list(range(10))  # one permutation per pass over the data


def test_gathered_batches_are_the_batches_of_the_examples_themselves():
    # The regime shuffles and batches indices and gathers each batch from the whole split: the same
    # batches, in the same order, as shuffling and batching the examples at those indices (what it did
    # before, at the cost of two copies of the split), over several passes and a partial last batch.
    rng = np.random.default_rng(4)
    pixels, labels = rng.normal(size=(103, 6)).astype(np.float32), rng.integers(0, 5, 103)
    part = np.sort(rng.choice(103, 77, replace=False))
    before = (tf.data.Dataset.from_tensor_slices(({"pixels": pixels[part]}, labels[part]))
              .shuffle(len(part), seed=7, reshuffle_each_iteration=True).repeat().batch(16, drop_remainder=True))
    now = regime._dataset({"pixels": tf.constant(pixels)}, tf.constant(labels), part, 16, shuffle=True, seed=7)
    for (x_before, y_before), (x_now, y_now) in zip(before.take(15), now.take(15)):  # 3 passes and more
        np.testing.assert_array_equal(x_now["pixels"].numpy(), x_before["pixels"].numpy())
        np.testing.assert_array_equal(y_now.numpy(), y_before.numpy())
    held = list(regime._dataset({"pixels": tf.constant(pixels)}, tf.constant(labels), part, 32, shuffle=False,
                                seed=7))
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in held]), labels[part])
    assert [len(y) for _, y in held] == [32, 32, 13]


def test_a_loaded_split_is_not_copied_out_of_its_tensors(tmp_path):
    # Tensor.numpy() copies (a second for 160,000 digits here): the loader hands out read-only views.
    from models.common.inputs import load_split

    spec = {"pixels": tf.io.FixedLenFeature([4], tf.float32), "label": tf.io.FixedLenFeature([1], tf.int64)}
    with tf.io.TFRecordWriter(str(tmp_path / "part-0.gz"), options="GZIP") as out:
        for i in range(50):
            out.write(tf.train.Example(features=tf.train.Features(feature={
                "pixels": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)] * 4)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3]))})).SerializeToString())
    loaded = load_split(str(tmp_path / "*.gz"), spec)
    assert loaded is not None and loaded["pixels"].shape == (50, 4)
    assert not loaded["pixels"].flags.writeable and not loaded["pixels"].flags.owndata
    np.testing.assert_array_equal(loaded["pixels"][:, 0], np.arange(50, dtype=np.float32))
    # And back: tf.convert_to_tensor copies a numpy array, even this view; asked for, the tensors themselves.
    held = load_split(str(tmp_path / "*.gz"), spec, tensors=True)
    assert held is not None and all(tf.convert_to_tensor(value) is value for value in held.values())
    np.testing.assert_array_equal(np.asarray(held["pixels"]), loaded["pixels"])


def test_step_budget_grows_sublinearly_with_the_data():
    # The TrainArgs budget (15 passes) grows linearly with the data; the default budget grows with its
    # square root, is checked at least MIN_CHECKS times, and never drops below min_steps on small sets.
    plans = {n: regime.schedule(n, 64, min_steps=1000, max_steps=15 * -(-n // 64), patience_steps=300)
             for n in (1_200, 34_000, 136_000)}
    assert plans[1_200].budget == 1000 and plans[1_200].steps_per_check == regime.MIN_STEPS_PER_CHECK
    assert plans[34_000].budget < 15 * 34_000 // 64 / 3
    assert plans[136_000].budget == pytest.approx(2 * plans[34_000].budget, rel=0.01)
    for plan in plans.values():
        assert plan.epochs * plan.steps_per_check >= plan.budget
        assert plan.epochs >= regime.MIN_CHECKS or plan.steps_per_check == regime.MIN_STEPS_PER_CHECK
    # --train-steps: exactly that budget, checked once per pass as before.
    explicit = regime.schedule(136_000, 64, min_steps=0, max_steps=20_000, patience_steps=300, scale_budget=False)
    assert explicit.budget == 20_000 and explicit.steps_per_check == 136_000 // 64


def test_the_held_out_part_is_capped():
    labels = np.repeat(np.arange(10), 4000)
    fit, held = regime.stopping_holdout(labels, 0.15, seed=0)
    assert len(held) == regime.MAX_HOLDOUT_EXAMPLES and len(fit) + len(held) == len(labels)
    assert np.bincount(labels[held]).tolist() == [regime.MAX_HOLDOUT_EXAMPLES // 10] * 10
    small = np.repeat(np.arange(3), 100)
    assert len(regime.stopping_holdout(small, 0.15, seed=0)[1]) == len(regime.holdout_split(small, 0.15, 0)[1])


def test_the_trainer_holds_only_what_it_reads_under_the_regime_budget(monkeypatch):
    # Both image features parsed under the 256 MB input budget put a 200k train split over it, and the
    # Trainer then streamed 15 fixed passes: it holds the network's input, the references' pixels and the
    # label only (transformed from the raw image and label it parses), under the regime's budget, and
    # nothing in memory across workers.
    from types import SimpleNamespace

    from models.cnn import byte_pixels, trainer
    from models.common.training import TrainingSettings

    calls = []
    # The Trainer takes the loaded tensors themselves: tf.convert_to_tensor copies a numpy array, even a view.
    monkeypatch.setattr(trainer, "load_split", lambda files, spec, budget, transform, tensors: calls.append(
        (files, set(spec), budget, set(transform))) if tensors else pytest.fail("numpy arrays asked for"))
    raw = {features.IMAGE: tf.io.FixedLenFeature([4], tf.int64), features.LABEL: tf.io.FixedLenFeature([], tf.string)}
    # The keys stand for the function to them; a split over the budget transformed is tried as byte pixels.
    data = SimpleNamespace(reader=lambda keys: (raw, keys), image_shape=[2, 2, 1],
                           byte_reader=lambda: (raw, (byte_pixels.PIXELS, features.LABEL_XF)))
    fn_args = SimpleNamespace(train_files=["train"], eval_files=["eval"], custom_config={})
    transformed, as_bytes = {features.IMAGE_XF, features.LABEL_XF}, {byte_pixels.PIXELS, features.LABEL_XF}
    trainer._load_splits(fn_args, TrainingSettings(), data, on_base_model=False)
    assert calls == [(files, {features.IMAGE, features.LABEL}, regime.IN_MEMORY_BYTES, keys)
                     for files in (["train"], ["eval"]) for keys in (transformed, as_bytes)]
    calls.clear()
    trainer._load_splits(fn_args, TrainingSettings(strategy="multi_worker"), data, on_base_model=True)
    assert calls[0][3] == {features.IMAGE_XF, features.IMAGE_UNIT_XF, features.LABEL_XF} and calls[0][2] == 0

    # Where the ExampleGen's counts say the transformed pixels (4 floats and an int64 label an example here)
    # exceed the budget, no transformed load is begun; and a train split held as bytes holds its eval split so.
    def load(files, spec, budget, transform, tensors):
        calls.append((files, set(transform)))
        return {byte_pixels.PIXELS: np.zeros((1, 4), np.uint8)} if byte_pixels.PIXELS in transform else None

    monkeypatch.setattr(trainer, "load_split", load)
    over = regime.IN_MEMORY_BYTES // (4 * 4 + 8) + 1
    for counts, expected in [({"train": over, "eval": 10}, [(["train"], as_bytes), (["eval"], as_bytes)]),
                             ({"train": over - 1, "eval": over}, [(["train"], transformed), (["train"], as_bytes),
                                                                  (["eval"], as_bytes)])]:
        calls.clear()
        fn_args.custom_config = {"data_facts": {"split_counts": counts}}
        trainer._load_splits(fn_args, TrainingSettings(), data, on_base_model=False)
        assert calls == expected, counts


def test_runs_of_steps_train_the_same_steps_and_count_each(tmp_path, monkeypatch):
    """The in-memory regime's ``STEPS_PER_EXECUTION``: Keras runs that many steps per call, so a model
    trained that way must end on exactly the weights and held-out checks of one step per call (same
    batches, same augmentation and dropout draws), and the live progress must still count every step
    (Keras calls the callbacks once per run, with the run's last step)."""
    from stackenv import progress

    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(tmp_path))
    x = np.random.RandomState(0).normal(size=(600, 16 * 16)).astype(np.float32)
    y = np.random.RandomState(1).randint(0, 3, size=600)
    hparams = CnnHyperparameters(filters=4, augment=("translate", "zoom"))
    trained = {}
    for steps_per_execution in (1, regime.STEPS_PER_EXECUTION):
        tf.keras.utils.set_random_seed(7)
        model, report = regime.fit_with_holdout(
            lambda spe=steps_per_execution: build_cnn((16, 16, 1), 3, hparams=hparams, steps_per_execution=spe),
            {features.IMAGE_XF: x}, y, batch_size=32, min_steps=0, max_steps=130, patience_steps=1000,
            holdout_fraction=0.15, class_weights="off", num_classes=3, seed=0, scale_budget=False)
        trained[steps_per_execution] = model.get_weights(), report.curves
    assert regime.STEPS_PER_EXECUTION > 1 and 50 % regime.STEPS_PER_EXECUTION  # a run is cut at each check
    one, runs = trained[1], trained[regime.STEPS_PER_EXECUTION]
    assert one[1] == runs[1] and len(one[1]["val_accuracy"]) == 3  # three checks of 50 steps each
    for a, b in zip(one[0], runs[0]):
        np.testing.assert_array_equal(a, b)
    counts, _ = progress.read(str(tmp_path))  # written by the counter when training ends, not by a flush here
    assert counts["training steps"] == 2 * 3 * 50
