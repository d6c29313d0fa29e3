"""The CNN's Trainer reads ExampleGen's raw examples through the transform graph (models/common/raw_examples.py)
instead of Transform's written output: it must see exactly what Transform would have written, on both input
paths, and its in-memory budget must count what it holds (transformed floats), not what it parsed."""
import numpy as np

from models.cnn import features
from models.common import raw_examples
from models.common.inputs import load_split, make_dataset

KEYS = (features.IMAGE_XF, features.LABEL_XF, features.IMAGE_UNIT_XF)


def _expected(transformed_rows, key):
    return np.stack([np.asarray(row[key]).reshape(-1) for row in transformed_rows]).squeeze()


def test_raw_examples_through_the_graph_equal_what_transform_materializes(cnn_transform, digits_examples, tmp_path):
    from conftest import write_examples

    # cnn_transform: real tft_beam AnalyzeAndTransformDataset on these 300 digits, its transformed rows materialized.
    output, transformed = cnn_transform
    path = write_examples(digits_examples[:300], tmp_path / "raw.gz")
    spec, transform = raw_examples.reader(output, features.RAW_INPUTS, KEYS)
    assert set(spec) == {features.IMAGE, features.LABEL}

    held = load_split(path, spec, transform=transform)
    assert held is not None and set(held) == set(KEYS)
    streamed = {key: [] for key in KEYS}
    for x, y in make_dataset(path, spec, features.LABEL_XF, 64, shuffle=False, repeat=False,
                             memory_budget_bytes=0, transform=transform):  # 0: the streaming path
        streamed[features.LABEL_XF].append(y.numpy())
        for key in (features.IMAGE_XF, features.IMAGE_UNIT_XF):
            streamed[key].append(x[key].numpy())
    for key in KEYS:
        expected = _expected(transformed, key)
        for got in (held[key], np.concatenate(streamed[key])):
            assert got.shape == expected.shape, key
            if key == features.LABEL_XF:
                np.testing.assert_array_equal(got, expected)
            else:
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    # the labels are the data's own class ids (the vocabulary keeps the classes' sorted order)
    np.testing.assert_array_equal(held[features.LABEL_XF], [row[features.LABEL_ID] for row in digits_examples[:300]])


def test_the_in_memory_budget_counts_the_transformed_features_held(cnn_transform, digits_examples, tmp_path):
    from conftest import write_examples

    output, _ = cnn_transform
    path = write_examples(digits_examples[:300], tmp_path / "raw.gz")
    spec, transform = raw_examples.reader(output, features.RAW_INPUTS, (features.IMAGE_XF, features.LABEL_XF))
    pixels = int(np.prod(spec[features.IMAGE].shape))
    held = 300 * (pixels * 4 + 8)      # float32 pixels and an int64 label per example
    parsed = 300 * (pixels * 8 + 8)    # the raw int64 pixels alone, twice the floats
    assert load_split(path, spec, memory_budget_bytes=held, transform=transform) is not None
    assert load_split(path, spec, memory_budget_bytes=held - 1, transform=transform) is None
    assert held < parsed
