"""models.common.inputs.make_dataset: order, coverage and determinism of both paths.

Small GZIP TFRecord files (3 files, 37 + 38 + 39 examples; example ``i`` has label ``i``
and features derived from ``i``). The in-memory path is the default for them; the
streaming path is reached with ``cache=False``, ``memory_budget_bytes=0``, or a budget the
parsed examples exceed.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from conftest import PROJECT_ROOT

from models.common.inputs import make_dataset

FILE_SIZES = (37, 38, 39)
N = sum(FILE_SIZES)
WIDTH = 32  # mostly zeros: the GZIP files are much smaller than the parsed tensors
SPEC = {"x": tf.io.FixedLenFeature([WIDTH], tf.float32),
        "id": tf.io.FixedLenFeature([1], tf.int64)}
BATCH = 10


@pytest.fixture(scope="module")
def pattern(tmp_path_factory):
    directory = tmp_path_factory.mktemp("inputs")
    i = 0
    for f, size in enumerate(FILE_SIZES):
        with tf.io.TFRecordWriter(str(directory / f"part-{f:05d}.gz"), options="GZIP") as writer:
            for _ in range(size):
                x = [float(i), 2.0 * i] + [0.0] * (WIDTH - 2)
                example = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                }))
                writer.write(example.SerializeToString())
                i += 1
    return str(directory / "*.gz")


def ids_of(dataset, batches=None):
    """The label stream, checking every batch's features belong to its labels."""
    out = []
    for features, label in (dataset if batches is None else dataset.take(batches)):
        ids = label.numpy()[:, 0]
        np.testing.assert_array_equal(features["x"].numpy()[:, :2], np.stack([ids, 2 * ids], 1))
        assert set(features) == {"x"}
        out.append(ids)
    return out


def is_in_memory(dataset) -> bool:
    return dataset.options().autotune.enabled is False  # set only by the in-memory path


def assert_epochs_are_permutations(stream, epochs):
    for e in range(epochs):
        assert sorted(stream[e * N:(e + 1) * N]) == list(range(N)), f"epoch {e}"


@pytest.mark.parametrize("budget", [None, 0])
def test_training_stream_is_one_permutation_per_epoch(pattern, budget):
    dataset = make_dataset(pattern, SPEC, "id", BATCH, seed=7, memory_budget_bytes=budget)
    assert is_in_memory(dataset) == (budget is None)
    assert dataset.element_spec[1].shape == (BATCH, 1)  # static batch: drop_remainder
    batches = ids_of(dataset, 3 * N // BATCH + 1)
    assert {len(b) for b in batches} == {BATCH}
    stream = list(np.concatenate(batches))
    assert_epochs_are_permutations(stream, 3)
    epochs = [stream[e * N:(e + 1) * N] for e in range(3)]
    assert epochs[0] != list(range(N))  # shuffled
    assert epochs[0] != epochs[1] != epochs[2]  # a new permutation every epoch


def test_reshuffled_on_every_iteration(pattern):
    dataset = make_dataset(pattern, SPEC, "id", BATCH, seed=7, repeat=False)
    first, second = (list(np.concatenate(ids_of(dataset))) for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(N))
    assert first != second


def test_seed_determinism(pattern):
    def stream(seed, parallel=True):
        dataset = make_dataset(pattern, SPEC, "id", BATCH, seed=seed, parallel=parallel)
        return list(np.concatenate(ids_of(dataset, 2 * N // BATCH)))

    assert stream(11) == stream(11) == stream(11, parallel=False)
    assert stream(11) != stream(12)


@pytest.mark.parametrize("budget, parallel", [(None, True), (None, False), (0, True)])
def test_eval_covers_every_example_once_in_file_order(pattern, budget, parallel):
    dataset = make_dataset(pattern, SPEC, "id", BATCH, shuffle=False, repeat=False,
                           memory_budget_bytes=budget, parallel=parallel)
    assert is_in_memory(dataset) == (budget is None)
    batches = ids_of(dataset)
    assert [len(b) for b in batches] == [BATCH] * (N // BATCH) + [N % BATCH]  # partial last
    assert list(np.concatenate(batches)) == list(range(N))


def test_shuffled_eval_covers_every_example_once(pattern):
    batches = ids_of(make_dataset(pattern, SPEC, "id", BATCH, seed=1, repeat=False))
    assert len(batches[-1]) == N % BATCH
    assert sorted(np.concatenate(batches)) == list(range(N))


def test_unshuffled_repeat_streams_file_order_across_epochs(pattern):
    dataset = make_dataset(pattern, SPEC, "id", BATCH, shuffle=False, repeat=True)
    stream = list(np.concatenate(ids_of(dataset, 2 * N // BATCH)))
    assert stream == (list(range(N)) * 2)[:len(stream)]


@pytest.mark.parametrize("kwargs", [
    {"cache": False},
    {"memory_budget_bytes": 0},
    # Above the files' size, below the parsed size: the load is abandoned midway.
    {"memory_budget_bytes": 6_000},
])
def test_fallback_streaming_yields_the_same_examples(pattern, kwargs):
    compressed = sum(tf.io.gfile.stat(f).length for f in tf.io.gfile.glob(pattern))
    assert compressed < 6_000 < N * (WIDTH * 4 + 8)  # the premise of the last case
    train = make_dataset(pattern, SPEC, "id", BATCH, seed=5, **kwargs)
    assert not is_in_memory(train)
    assert_epochs_are_permutations(list(np.concatenate(ids_of(train, -(-2 * N // BATCH)))), 2)
    evaluation = make_dataset(pattern, SPEC, "id", BATCH, shuffle=False, repeat=False, **kwargs)
    in_memory = make_dataset(pattern, SPEC, "id", BATCH, shuffle=False, repeat=False)
    assert is_in_memory(in_memory) and not is_in_memory(evaluation)
    assert [list(b) for b in ids_of(evaluation)] == [list(b) for b in ids_of(in_memory)]
    assert in_memory.element_spec == evaluation.element_spec


def test_no_files_is_an_error(tmp_path):
    with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.NotFoundError)):
        ids_of(make_dataset(str(tmp_path / "*.gz"), SPEC, "id", BATCH))


MIRRORED = textwrap.dedent("""
    import json, sys, stackenv
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    replicas = int(sys.argv[2])
    if replicas > 1:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    from models.common.distribution import make_strategy
    from models.common.inputs import make_dataset
    spec = {"x": tf.io.FixedLenFeature([32], tf.float32),
            "id": tf.io.FixedLenFeature([1], tf.int64)}
    strategy = make_strategy("mirrored")
    dataset = make_dataset(sys.argv[1], spec, "id", 10, seed=0)
    assert dataset.options().autotune.enabled is False  # the in-memory path
    split, ids = [], []
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    for _ in range(11):  # 110 of the 114 examples: the first epoch's
        features, label = next(iterator)
        labels = strategy.experimental_local_results(label)
        xs = strategy.experimental_local_results(features["x"])
        split.append([len(p) for p in labels])
        batch_ids = [int(i) for p in labels for i in p.numpy()[:, 0]]
        assert batch_ids == [int(v) for p in xs for v in p.numpy()[:, 0]]
        ids += batch_ids
    with strategy.scope():
        inputs = tf.keras.Input((32,), name="x")
        model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(inputs))
        model.compile("sgd", "mse")
    history = model.fit(dataset, epochs=2, steps_per_epoch=12, verbose=0)
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "split": split,
                      "distinct_ids": len(set(ids)), "epochs": len(history.history["loss"])}))
""")


@pytest.mark.parametrize("replicas", [1, 2])  # 1: what the Trainer gets on a CPU-only machine
def test_in_memory_dataset_under_mirrored_strategy(pattern, replicas):
    result = subprocess.run([sys.executable, "-c", MIRRORED, pattern, str(replicas)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == replicas
    assert report["split"] == [[10 // replicas] * replicas] * 11
    assert report["distinct_ids"] == 110
    assert report["epochs"] == 2
