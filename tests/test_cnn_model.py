"""CNN family: preprocessing through real tft_beam, model build, training, export signatures."""
import numpy as np
import pytest
import tensorflow as tf

from models.cnn import export, features
from models.cnn.model import build_cnn, conv_block_count
from models.common.inputs import make_dataset


def test_vocabulary_keeps_sorted_class_order_and_ids_match_data(cnn_transform, digits_dataset, digits_examples):
    tft_output, transformed = cnn_transform
    vocabulary = [v.decode() for v in tft_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    assert vocabulary == list(digits_dataset.classes)
    for raw, row in zip(digits_examples, transformed):
        assert row[features.LABEL_XF] == raw[features.LABEL_ID]


def test_pixels_are_standardised_per_pixel_with_train_statistics(cnn_transform, digits_examples):
    """Transform's analyzers see the train rows; the same constants then apply to any input."""
    from models.cnn.preprocessing import STD_FLOOR

    _, transformed = cnn_transform
    pixels = np.stack([row[features.IMAGE_XF] for row in transformed])
    raw = np.stack([r[features.IMAGE] for r in digits_examples[: len(transformed)]]) / 255.0
    expected = (raw - raw.mean(0)) / np.maximum(raw.std(0), STD_FLOOR)
    np.testing.assert_allclose(pixels, expected, rtol=1e-4, atol=1e-4)
    varying = raw.std(0) > STD_FLOOR
    np.testing.assert_allclose(pixels[:, varying].mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(pixels[:, varying].std(0), 1.0, rtol=1e-3)


def test_without_a_base_model_transform_writes_one_image_feature(digits_dataset, digits_examples, tmp_path):
    """The [0, 1] pixels are a base model's input only: a CNN from scratch gets one copy of every pixel (a
    second one doubled what the transform graph computes for training and serving); the family asks for both only with
    --base-model."""
    from conftest import transform_digits

    from models.cnn.preprocessing import UNIT_IMAGE
    from pipeline.families import get_family

    _, transformed = transform_digits(digits_dataset, digits_examples, tmp_path, 20, unit_image=False)
    assert set(transformed[0]) == {features.IMAGE_XF, features.LABEL_XF}
    family = get_family("cnn")

    class Config:
        base_model = None

    assert family.transform_config(Config(), digits_dataset) == {}
    Config.base_model = "/some/extractor"
    assert family.transform_config(Config(), digits_dataset) == {UNIT_IMAGE: True}


@pytest.mark.parametrize("shape,blocks", [((8, 8, 1), 2), ((32, 32, 3), 3), ((4, 4, 1), 1)])
def test_model_shapes(shape, blocks):
    assert conv_block_count(shape[0], shape[1]) == blocks
    model = build_cnn(shape, num_classes=7)
    batch = np.random.rand(5, int(np.prod(shape))).astype("float32")
    out = model.predict(batch, verbose=0)
    assert out.shape == (5, 7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    # Compiled for what the Trainer fits: Adam at the asked rate, and a loss that is the mean
    # cross-entropy of the true class plus the L2 penalty (1e-4 * sum of squared kernels, hparams.l2),
    # written here from the definitions, not read from Keras.
    assert isinstance(model.optimizer, tf.keras.optimizers.Adam)
    assert float(model.optimizer.learning_rate) == pytest.approx(1e-3)
    labels = np.arange(5) % 7
    penalty = 1e-4 * sum(float(np.sum(np.square(layer.kernel.numpy())))
                         for layer in model.layers if hasattr(layer, "kernel"))
    expected = -np.log(out[np.arange(5), labels]).mean() + penalty
    measured = model.evaluate(batch, labels, verbose=0, return_dict=True)
    assert measured["loss"] == pytest.approx(expected, rel=1e-4)
    assert measured["accuracy"] == pytest.approx(np.mean(out.argmax(1) == labels))


def _write_transformed(rows, path):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for row in rows:
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                features.IMAGE_XF: tf.train.Feature(float_list=tf.train.FloatList(value=row[features.IMAGE_XF])),
                features.IMAGE_UNIT_XF: tf.train.Feature(
                    float_list=tf.train.FloatList(value=row[features.IMAGE_UNIT_XF])),
                features.LABEL_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=[row[features.LABEL_XF]])),
            })).SerializeToString())


def test_train_export_and_both_signatures(cnn_transform, digits_examples, digits_dataset, tmp_path):
    tft_output, transformed = cnn_transform
    _write_transformed(transformed, tmp_path / "train.tfrecord.gz")
    spec = tft_output.transformed_feature_spec()
    dataset = make_dataset(str(tmp_path / "*.tfrecord.gz"), spec, features.LABEL_XF, 32, seed=1)
    model = build_cnn(digits_dataset.image_shape, len(digits_dataset.classes))
    history = model.fit(dataset, epochs=3, steps_per_epoch=20, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]

    export_dir = str(tmp_path / "export")
    export.export_serving_model(model, tft_output, export_dir, digits_dataset.image_shape)
    loaded = tf.saved_model.load(export_dir)
    assert {"serving_default", export.PREDICT_IMAGE_SIGNATURE, "transform_features"} <= set(loaded.signatures)

    rows = digits_examples[:8]
    serialized = [tf.train.Example(features=tf.train.Features(feature={
        features.IMAGE: tf.train.Feature(int64_list=tf.train.Int64List(value=r[features.IMAGE]))}))
        .SerializeToString() for r in rows]
    by_example = loaded.signatures["serving_default"](examples=tf.constant(serialized))
    h, w, c = digits_dataset.image_shape
    images = np.stack([r[features.IMAGE] for r in rows]).reshape(-1, h, w, c).astype("float32")
    by_image = loaded.signatures[export.PREDICT_IMAGE_SIGNATURE](images=tf.constant(images))

    n = len(digits_dataset.classes)
    assert by_example["probabilities"].shape == (8, n) and by_image["probabilities"].shape == (8, n)
    np.testing.assert_allclose(by_example["probabilities"], by_image["probabilities"], rtol=1e-4, atol=1e-6)
    names = [v.decode() for v in by_image["classes"].numpy()]
    assert names == [digits_dataset.classes[i] for i in by_image["class_ids"].numpy()]

    # TFMA reads the transformed label through this signature.
    with_label = [tf.train.Example(features=tf.train.Features(feature={
        features.IMAGE: tf.train.Feature(int64_list=tf.train.Int64List(value=r[features.IMAGE])),
        features.LABEL: tf.train.Feature(bytes_list=tf.train.BytesList(value=[r[features.LABEL]]))}))
        .SerializeToString() for r in rows]
    labels = loaded.signatures["transform_features"](examples=tf.constant(with_label))[features.LABEL_XF]
    assert list(labels.numpy()) == [r[features.LABEL_ID] for r in rows]


def test_export_carries_tf_serving_warmup_requests_that_run(cnn_transform, digits_dataset, tmp_path):
    from models.common import warmup

    tft_output, _ = cnn_transform
    model = build_cnn(digits_dataset.image_shape, len(digits_dataset.classes))
    export_dir = str(tmp_path / "export")
    export.export_serving_model(model, tft_output, export_dir, digits_dataset.image_shape)
    requests = warmup.read_warmup_requests(export_dir)
    assert [name for name, _ in requests] == ["serving_default", export.PREDICT_IMAGE_SIGNATURE]
    loaded = tf.saved_model.load(export_dir)
    for name, inputs in requests:  # what TF Serving does before the version takes traffic
        outputs = loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
        assert outputs["probabilities"].shape == (1, len(digits_dataset.classes)), name


def test_served_predictions_are_not_augmented(cnn_transform, digits_examples, digits_dataset, tmp_path):
    """Random augmentation layers default to training=True outside fit(): the export must not."""
    from models.cnn.hparams import CnnHyperparameters

    tft_output, _ = cnn_transform
    hparams = CnnHyperparameters(augment=("translate", "zoom", "contrast"))
    model = build_cnn(digits_dataset.image_shape, len(digits_dataset.classes), hparams=hparams)
    export_dir = str(tmp_path / "export")
    export.export_serving_model(model, tft_output, export_dir, digits_dataset.image_shape)
    loaded = tf.saved_model.load(export_dir)
    h, w, c = digits_dataset.image_shape
    images = tf.constant(np.stack([r[features.IMAGE] for r in digits_examples[:16]])
                         .reshape(-1, h, w, c).astype("float32"))
    first = loaded.signatures[export.PREDICT_IMAGE_SIGNATURE](images=images)["probabilities"].numpy()
    again = loaded.signatures[export.PREDICT_IMAGE_SIGNATURE](images=images)["probabilities"].numpy()
    np.testing.assert_array_equal(first, again)
