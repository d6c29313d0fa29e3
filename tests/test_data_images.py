"""Tests of data.images / data.tfrecords on tiny generated data (no downloads)."""
from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf  # noqa: E402  (after the data package, which imports stackenv)
from PIL import Image
from support.records import count_records, read_examples

from data import features
from data.errors import DataError
from data.images import load_image_array, prepare_image_dataset
from data.tfrecords import DatasetManifest, ImageFacts, write_examples

CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer",
               "dog", "frog", "horse", "ship", "truck"]


# --------------------------------------------------------------------------- helpers


def read_all(manifest: DatasetManifest) -> dict[str, np.ndarray]:
    """Parse every record with the documented spec; returns feature -> stacked values."""
    length = int(np.prod(manifest.image_shape))
    spec = {
        features.IMAGE: tf.io.FixedLenFeature([length], tf.int64),
        features.LABEL: tf.io.FixedLenFeature([], tf.string),
        features.LABEL_ID: tf.io.FixedLenFeature([], tf.int64),
        features.BRIGHTNESS: tf.io.FixedLenFeature([], tf.string),
        features.EXAMPLE_ID: tf.io.FixedLenFeature([], tf.string),
    }
    files = sorted(tf.io.gfile.glob(manifest.examples_glob))
    assert files, manifest.examples_glob
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(10_000)
    parts = [tf.io.parse_example(batch, spec) for batch in dataset]
    out = {k: np.concatenate([p[k].numpy() for p in parts]) for k in spec}
    for key in (features.LABEL, features.BRIGHTNESS, features.EXAMPLE_ID):
        out[key] = np.array([v.decode() for v in out[key]])
    out[features.IMAGE] = out[features.IMAGE].reshape(-1, *manifest.image_shape)
    return out


def by_id(records: dict[str, np.ndarray]) -> dict[str, dict[str, object]]:
    ids = records[features.EXAMPLE_ID]
    return {eid: {k: v[i] for k, v in records.items()} for i, eid in enumerate(ids)}


def mtimes(folder: str | Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()}


def save(img: Image.Image, path: Path, **kwargs: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, **kwargs)


def assert_names(exc: pytest.ExceptionInfo, path: Path) -> None:
    message = str(exc.value)
    assert str(path) in message, message
    assert "\n" not in message


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[DatasetManifest, Path]:
    cache = tmp_path_factory.mktemp("cache")
    return prepare_image_dataset(None, cache), cache


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two classes of images of mixed sizes and modes, plus files that must be ignored."""
    root = tmp_path / "images"
    save(Image.new("RGB", (40, 20), (255, 0, 0)), root / "cat" / "red.png")
    save(Image.new("L", (10, 10), 128), root / "cat" / "gray.jpg", quality=95)
    save(Image.new("RGBA", (16, 16), (0, 0, 0, 0)), root / "cat" / "clear.png")
    palette = Image.new("P", (9, 13), 1)
    palette.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)
    save(palette, root / "dog" / "blue_palette.png")
    save(Image.fromarray(np.full((6, 6), 65535, np.uint16)), root / "dog" / "white16.PNG")
    save(Image.new("LA", (7, 5), (0, 255)), root / "dog" / "nested" / "black_la.png")
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "dog" / ".hidden.png").write_bytes(b"garbage, but hidden")
    (root / ".DS_Store").write_bytes(b"\0\1")
    (root / "README.md").write_text("ignored")
    return root


def write_cifar(folder: Path) -> None:
    """A tiny CIFAR-10 python-version folder: 20 training + 10 test images."""
    folder.mkdir(parents=True)
    names = [n.encode() for n in CIFAR_NAMES]
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_vis": 3072}, f, protocol=2)
    rng = np.random.default_rng(0)
    for name, n, offset in (("data_batch_1", 20, 0), ("test_batch", 10, 3)):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [(i + offset) % 10 for i in range(n)]
        if name == "data_batch_1":
            data[0] = 0
            data[0, :1024] = 255  # image 0: pure red (the first 1024 values are R)
            data[1] = 0
            # image 1: one pixel at row 2, column 5 = (10, 20, 30)
            for channel, value in enumerate((10, 20, 30)):
                data[1, channel * 1024 + 2 * 32 + 5] = value
        batch = {b"batch_label": name.encode(), b"data": data, b"labels": labels}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)


# ---------------------------------------------------------------------------- digits


def test_digits_follow_the_feature_spec(digits: tuple[DatasetManifest, Path]) -> None:
    from sklearn.datasets import load_digits

    manifest, cache = digits
    assert manifest.kind == "image"
    assert manifest.num_examples == 1797
    assert manifest.classes == [str(d) for d in range(10)]
    assert sum(manifest.class_counts.values()) == 1797
    assert manifest.image_shape == [8, 8, 1]
    assert Path(manifest.examples_dir) == cache / manifest.fingerprint[:16]
    assert DatasetManifest.from_json(Path(manifest.examples_dir) / "manifest.json") == manifest

    records = read_all(manifest)
    images, ids = records[features.IMAGE], records[features.EXAMPLE_ID]
    assert len(images) == 1797 and len(set(ids)) == 1797
    assert images.min() == 0 and images.max() == 255
    classes = np.array(manifest.classes)
    assert (classes[records[features.LABEL_ID]] == records[features.LABEL]).all()

    row = by_id(records)["digits/00017"]
    sk = load_digits()
    np.testing.assert_array_equal(row[features.IMAGE][:, :, 0], np.rint(sk.images[17] * 255 / 16))
    assert row[features.LABEL] == str(sk.target[17])

    buckets = records[features.BRIGHTNESS]
    share = {b: float(np.mean(buckets == b)) for b in features.BRIGHTNESS_BUCKETS}
    assert set(buckets) == set(features.BRIGHTNESS_BUCKETS)
    assert all(0.3 < s < 0.37 for s in share.values()), share
    low, high = manifest.extra["brightness_thresholds"]
    means = images.reshape(len(images), -1).mean(axis=1)
    expected = np.where(means <= low, "dark", np.where(means <= high, "medium", "bright"))
    assert (expected == buckets).all()


def test_digits_second_call_reuses_cache(digits: tuple[DatasetManifest, Path],
                                         caplog: pytest.LogCaptureFixture) -> None:
    manifest, cache = digits
    before = mtimes(manifest.examples_dir)
    with caplog.at_level(logging.INFO, logger="data.images"):
        again = prepare_image_dataset(None, cache)
    assert again == manifest
    assert mtimes(manifest.examples_dir) == before
    assert sorted(p.name for p in cache.iterdir()) == [manifest.fingerprint[:16]]
    infos = [r for r in caplog.records if r.name == "data.images" and r.levelno == logging.INFO]
    assert len(infos) == 1
    assert "digits" in infos[0].message and "1797" in infos[0].message
    assert manifest.examples_dir in infos[0].message


def test_digits_resized_to_rgb(tmp_path: Path) -> None:
    manifest = prepare_image_dataset(None, tmp_path, image_size=12, channels=3)
    assert manifest.image_shape == [12, 12, 3]
    images = read_all(manifest)[features.IMAGE]
    # Gray input stays gray in RGB.
    assert (images[..., 0] == images[..., 1]).all() and (images[..., 1] == images[..., 2]).all()


# --------------------------------------------------------------------- class folders


def test_folder_mixed_images_rgb(folder: Path, tmp_path: Path) -> None:
    manifest = prepare_image_dataset(str(folder), tmp_path / "cache", image_size=12, channels=3)
    assert manifest.classes == ["cat", "dog"]
    assert manifest.class_counts == {"cat": 3, "dog": 3}
    assert manifest.image_shape == [12, 12, 3]
    rows = by_id(read_all(manifest))
    assert sorted(rows) == sorted([
        "cat/clear.png", "cat/gray.jpg", "cat/red.png",
        "dog/blue_palette.png", "dog/nested/black_la.png", "dog/white16.PNG",
    ])
    expected = {
        "cat/red.png": (255, 0, 0),
        "cat/clear.png": (255, 255, 255),  # fully transparent -> white background
        "dog/blue_palette.png": (0, 0, 255),
        "dog/white16.PNG": (255, 255, 255),  # 16-bit white scaled, not clipped garbage
        "dog/nested/black_la.png": (0, 0, 0),
    }
    for example_id, colour in expected.items():
        image = rows[example_id][features.IMAGE]
        assert image.shape == (12, 12, 3)
        assert (image == colour).all(), (example_id, image[0, 0])
    assert np.abs(rows["cat/gray.jpg"][features.IMAGE].astype(int) - 128).max() <= 2
    assert rows["dog/white16.PNG"][features.LABEL] == "dog"
    assert rows["dog/white16.PNG"][features.LABEL_ID] == 1


def test_load_image_array_matches_training(folder: Path, tmp_path: Path) -> None:
    manifest = prepare_image_dataset(folder, tmp_path / "cache", image_size=6, channels=3)
    rows = by_id(read_all(manifest))
    for example_id in ("cat/clear.png", "dog/blue_palette.png", "cat/gray.jpg"):
        served = load_image_array(folder / example_id, 6, 3)
        np.testing.assert_array_equal(served, rows[example_id][features.IMAGE])
    assert load_image_array(folder / "cat" / "red.png", (4, 7), 1).shape == (4, 7, 1)
    with pytest.raises(DataError) as exc:
        load_image_array(folder / "dog" / "notes.txt", 6, 3)
    assert_names(exc, folder / "dog" / "notes.txt")


def test_folder_grayscale_default_size(folder: Path, tmp_path: Path) -> None:
    manifest = prepare_image_dataset(folder, tmp_path / "cache", channels=1)
    assert manifest.image_shape == [32, 32, 1]
    assert manifest.extra["source_kind"] == "folder"
    red = by_id(read_all(manifest))["cat/red.png"][features.IMAGE]
    assert (red == 76).all()  # ITU-R 601-2 luma of pure red


@pytest.mark.parametrize("images,flags,shape", [
    ({"L": (28, 28)}, {}, [28, 28, 1]),                       # small grayscale digits keep their shape
    ({"L": (28, 28), "RGB": (20, 20)}, {}, [28, 28, 3]),      # one colour image: colour
    ({"RGB": (300, 200)}, {}, [32, 32, 3]),                  # never larger than 32 by default
    ({"L": (28, 28)}, {"image_size": 16}, [16, 16, 1]),       # a flag wins
    ({"L": (28, 28)}, {"channels": 3}, [28, 28, 3]),
])
def test_a_folder_keeps_its_own_smaller_shape_on_both_ingestion_paths(tmp_path, images, flags, shape):
    from data.images.sources import list_source

    root = tmp_path / "pics"
    for i, (mode, size) in enumerate(images.items()):
        for label in ("a", "b"):
            save(Image.new(mode, size, 100), root / label / f"{i}.png")
    manifest = prepare_image_dataset(root, tmp_path / "cache", **flags)
    assert manifest.image_shape == shape
    assert list(list_source(str(root), flags.get("image_size"), flags.get("channels")).shape) == shape


def test_folder_change_invalidates_cache(folder: Path, tmp_path: Path) -> None:
    first = prepare_image_dataset(folder, tmp_path / "cache", image_size=4)
    save(Image.new("RGB", (3, 3), (0, 255, 0)), folder / "dog" / "green.png")
    second = prepare_image_dataset(folder, tmp_path / "cache", image_size=4)
    assert second.fingerprint != first.fingerprint
    assert second.class_counts == {"cat": 3, "dog": 4}
    assert Path(first.examples_dir).is_dir()  # the old version stays for old pipeline runs


# ----------------------------------------------------------------------------- CIFAR


@pytest.mark.parametrize("point_at", ["batches_dir", "parent"])
def test_cifar_batches(tmp_path: Path, point_at: str) -> None:
    write_cifar(tmp_path / "src" / "cifar-10-batches-py")
    source = tmp_path / "src"
    if point_at == "batches_dir":
        source = source / "cifar-10-batches-py"
    manifest = prepare_image_dataset(source, tmp_path / "cache")
    assert manifest.image_shape == [32, 32, 3]
    assert manifest.num_examples == 30
    assert manifest.classes == sorted(CIFAR_NAMES)
    assert manifest.extra["cifar_batches"] == ["data_batch_1", "test_batch"]
    rows = by_id(read_all(manifest))
    red = rows["cifar/data_batch_1/0"][features.IMAGE]
    assert (red == (255, 0, 0)).all()
    dot = rows["cifar/data_batch_1/1"][features.IMAGE]
    assert tuple(dot[2, 5]) == (10, 20, 30)
    assert dot.sum() == 60
    assert rows["cifar/data_batch_1/1"][features.LABEL] == CIFAR_NAMES[1]
    assert rows["cifar/test_batch/0"][features.LABEL] == CIFAR_NAMES[3]
    for row in rows.values():
        assert manifest.classes[row[features.LABEL_ID]] == row[features.LABEL]


def test_cifar_grayscale_resized(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar")
    manifest = prepare_image_dataset(tmp_path / "cifar", tmp_path / "cache", 8, 1)
    assert manifest.image_shape == [8, 8, 1]
    red = by_id(read_all(manifest))["cifar/data_batch_1/0"][features.IMAGE]
    assert (red == 76).all()


def test_cifar_rejects_bad_batch(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar")
    bad = tmp_path / "cifar" / "data_batch_1"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(tmp_path / "cifar", tmp_path / "cache")
    assert_names(exc, bad)


# ------------------------------------------------------------------------- TFRecords


def test_tfrecord_round_trip(digits: tuple[DatasetManifest, Path], tmp_path: Path) -> None:
    manifest, _ = digits
    again = prepare_image_dataset(manifest.examples_dir, tmp_path)
    assert again.extra["source_kind"] == "tfrecord"
    assert again.examples_dir != manifest.examples_dir
    for key in ("num_examples", "classes", "class_counts", "image_shape"):
        assert getattr(again, key) == getattr(manifest, key), key
    assert again.extra["brightness_thresholds"] == manifest.extra["brightness_thresholds"]
    old, new = by_id(read_all(manifest)), by_id(read_all(again))
    assert old.keys() == new.keys()
    row_old, row_new = old["digits/00042"], new["digits/00042"]
    np.testing.assert_array_equal(row_old[features.IMAGE], row_new[features.IMAGE])
    assert row_old[features.LABEL] == row_new[features.LABEL]
    assert count_records(again.examples_glob) == manifest.num_examples


def test_tfrecord_single_file_without_manifest_infers_shape(
        digits: tuple[DatasetManifest, Path], tmp_path: Path) -> None:
    manifest, _ = digits
    single = tmp_path / "one.tfrecord.gz"
    shutil.copy(Path(manifest.examples_dir) / manifest.files[0], single)
    again = prepare_image_dataset(single, tmp_path / "cache")
    assert again.image_shape == [8, 8, 1] and again.num_examples == 1797


@pytest.mark.parametrize("keep", [0.5, -4, 5])
def test_truncated_tfrecord_names_file(digits: tuple[DatasetManifest, Path], tmp_path: Path,
                                       keep: float) -> None:
    manifest, _ = digits
    data = (Path(manifest.examples_dir) / manifest.files[0]).read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    bad = tmp_path / "src" / "broken.tfrecord.gz"
    bad.parent.mkdir()
    bad.write_bytes(data[:cut])
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(bad.parent, tmp_path / "cache")
    assert_names(exc, bad)
    with pytest.raises(DataError) as exc:
        count_records(str(bad))
    assert_names(exc, bad)


def test_tfrecord_missing_feature_names_file(tmp_path: Path) -> None:
    example = tf.train.Example(features=tf.train.Features(feature={
        features.LABEL: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a"])),
    }))
    write_examples([example], tmp_path / "src")
    path = next((tmp_path / "src").glob("*.tfrecord.gz"))
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(path, tmp_path / "cache")
    assert_names(exc, path)
    assert "'image'" in str(exc.value)


def test_write_examples_is_atomic(tmp_path: Path) -> None:
    def examples():
        yield tf.train.Example()
        raise RuntimeError("crash while converting")

    with pytest.raises(RuntimeError):
        write_examples(examples(), tmp_path / "out", num_shards=2)
    assert list(tmp_path.iterdir()) == []
    assert write_examples([tf.train.Example()] * 3, tmp_path / "out", num_shards=2) == 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "examples-00000-of-00002.tfrecord.gz", "examples-00001-of-00002.tfrecord.gz"]
    assert len(list(read_examples(str(tmp_path / "out" / "*.tfrecord.gz")))) == 3


# ---------------------------------------------------------------------------- errors


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(str(missing), tmp_path / "cache")
    assert_names(exc, missing)
    assert "does not exist" in str(exc.value)


def test_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(empty, tmp_path / "cache")
    assert_names(exc, empty)


def test_images_not_in_class_folders(tmp_path: Path) -> None:
    save(Image.new("L", (4, 4)), tmp_path / "flat" / "a.png")
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(tmp_path / "flat", tmp_path / "cache")
    assert_names(exc, tmp_path / "flat")
    assert "sub-folder per class" in str(exc.value)


def test_class_folder_without_images(folder: Path, tmp_path: Path) -> None:
    (folder / "empty_class").mkdir()
    (folder / "empty_class" / "readme.txt").write_text("no images here")
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(folder, tmp_path / "cache")
    assert_names(exc, folder / "empty_class")


def test_single_class(folder: Path, tmp_path: Path) -> None:
    shutil.rmtree(folder / "dog")
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(folder, tmp_path / "cache")
    assert_names(exc, folder)
    assert "at least two" in str(exc.value)


def test_garbage_png(folder: Path, tmp_path: Path) -> None:
    bad = folder / "dog" / "garbage.png"
    bad.write_bytes(b"this is not a PNG file at all" * 10)
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(folder, tmp_path / "cache")
    assert_names(exc, bad)
    assert not list((tmp_path / "cache").glob("*/manifest.json"))


@pytest.mark.parametrize("name,fmt", [("cut.png", "PNG"), ("cut.jpg", "JPEG")])
def test_truncated_image(folder: Path, tmp_path: Path, name: str, fmt: str) -> None:
    noise = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    full = tmp_path / f"full_{name}"
    Image.fromarray(noise).save(full, format=fmt)
    bad = folder / "cat" / name
    bad.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(folder, tmp_path / "cache")
    assert_names(exc, bad)


def test_file_that_is_not_tfrecord(tmp_path: Path) -> None:
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(b"\x1f\x8b")
    with pytest.raises(DataError) as exc:
        prepare_image_dataset(archive, tmp_path / "cache")
    assert_names(exc, archive)
    assert "extract" in str(exc.value)


@pytest.mark.parametrize("kwargs", [{"image_size": 0}, {"channels": 2}, {"image_size": 2.5}])
def test_bad_shape_arguments(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(DataError):
        prepare_image_dataset(None, tmp_path, **kwargs)


def test_manifest_json_round_trip(tmp_path: Path) -> None:
    manifest = DatasetManifest(
        kind="image", source="s", num_examples=2, fingerprint="f" * 64,
        examples_dir=str(tmp_path), extra={"x": [1, 2]},
        image=ImageFacts(classes=["a", "b"], class_counts={"a": 1, "b": 1}, image_shape=[2, 2, 1]),
    )
    manifest.to_json(tmp_path / "m.json")
    assert DatasetManifest.from_json(tmp_path / "m.json") == manifest
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DataError) as exc:
        DatasetManifest.from_json(tmp_path / "bad.json")
    assert_names(exc, tmp_path / "bad.json")
    assert sorted(os.listdir(tmp_path)) == ["bad.json", "m.json"]  # no temp files left


def test_prepare_names_every_unreadable_image_in_one_paragraph(tmp_path: Path) -> None:
    """The prepare step reads through the ExampleGen's listing and readers (data/images/sources.py), so a
    folder with several broken files is one paragraph naming each, as in the pipeline's ExampleGen."""
    for label in ("a", "b"):
        (tmp_path / "src" / label).mkdir(parents=True)
        Image.new("L", (8, 8), 40 if label == "a" else 200).save(tmp_path / "src" / label / "good.png")
    (tmp_path / "src" / "a" / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "src" / "b" / "empty.jpg").write_bytes(b"")
    with pytest.raises(DataError) as caught:
        prepare_image_dataset(tmp_path / "src", tmp_path / "cache")
    message = str(caught.value)
    assert "2 image file(s)" in message
    assert "cut.png" in message and "empty.jpg" in message
    assert not list((tmp_path / "cache").rglob("*.tfrecord.gz"))


def test_prepare_reads_a_folder_on_any_gfile_filesystem(tmp_path: Path) -> None:
    """One lister for both paths: ``prepare`` reads an object-store-like URI (TensorFlow's ram://) as the
    ExampleGen does, where it once accepted only a local folder."""
    root = f"ram://{tmp_path.name}/images"
    for label, value in (("dark", 30), ("light", 220)):
        tf.io.gfile.makedirs(f"{root}/{label}")
        for i in range(3):
            local = tmp_path / f"{label}{i}.png"
            Image.new("L", (6, 6), value + i).save(local)
            tf.io.gfile.copy(str(local), f"{root}/{label}/{i}.png")
    manifest = prepare_image_dataset(root, tmp_path / "cache")
    assert manifest.num_examples == 6 and manifest.classes == ["dark", "light"]
    assert manifest.image_shape == [6, 6, 1]
    pixels = read_all(manifest)[features.IMAGE]
    assert sorted(int(v) for v in pixels.reshape(6, -1)[:, 0]) == [30, 31, 32, 220, 221, 222]


def test_a_symlink_loop_inside_a_class_folder_is_named_not_followed(tmp_path: Path) -> None:
    """Class folders are walked by data.walk (one walker for both families): a link back up to an ancestor
    inside the data folder is a loop, named among what was not read, and every image is read once."""
    from data.images.listing import Unused, list_class_files

    for label in ("a", "b"):
        (tmp_path / "src" / label / "sub").mkdir(parents=True)
        Image.new("L", (4, 4), 9).save(tmp_path / "src" / label / "sub" / "x.png")
    (tmp_path / "src" / "a" / "sub" / "up").symlink_to("..")
    unused = Unused()
    per_class = list_class_files(str(tmp_path / "src"), unused)
    assert {name: [Path(p).name for p in files] for name, files in per_class.items()} == {"a": ["x.png"],
                                                                                       "b": ["x.png"]}
    assert [why for path, why in unused.entries if path.endswith("sub/up")] == [
        f"symlink loop (links back to {tmp_path / 'src' / 'a'})"]
