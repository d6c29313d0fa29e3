"""Tests of data.manifest and data.prepare: family facts as a typed part, old manifests, cache."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf  # noqa: E402  (after the data package, which imports stackenv)

from data import text_sources
from data.errors import DataError
from data.images import prepare_image_dataset
from data.manifest import MANIFEST_NAME, DatasetManifest, ImageFacts
from data.prepare import (
    Conversion,
    SourcePlan,
    load_cached,
    prepare,
    shard_count,
    source_fingerprint,
)
from data.text import prepare_text_dataset

# manifest.json as the version before the family parts wrote it (format version 1).
LEGACY_IMAGE = {
    "kind": "image", "source": "scikit-learn 1.5.2 bundled digits", "num_examples": 4,
    "classes": ["0", "1"], "class_counts": {"0": 2, "1": 2}, "image_shape": [8, 8, 1],
    "fingerprint": "a" * 64, "examples_dir": "/old/place", "file_pattern": "*.tfrecord.gz",
    "files": ["examples-00000-of-00001.tfrecord.gz"],
    "extra": {"source_kind": "digits", "format_version": 1},
}
LEGACY_TEXT = {
    "kind": "text", "source": "text file /x.txt", "num_examples": 3, "classes": [],
    "class_counts": {}, "image_shape": None, "fingerprint": "b" * 64, "examples_dir": "/t",
    "extra": {"source_kind": "text-file", "format_version": 1, "context_words": 16},
}


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory: pytest.TempPathFactory) -> DatasetManifest:
    folder = tmp_path_factory.mktemp("text")
    (folder / "a.txt").write_text(" ".join(f"w{i}" for i in range(40)))
    return prepare_text_dataset(folder / "a.txt", tmp_path_factory.mktemp("cache"), 4, 2, 3)


def test_legacy_image_manifest_loads_into_the_image_part() -> None:
    manifest = DatasetManifest.from_dict(LEGACY_IMAGE)
    assert manifest.image == ImageFacts(["0", "1"], {"0": 2, "1": 2}, [8, 8, 1])
    assert (manifest.classes, manifest.image_shape) == (["0", "1"], [8, 8, 1])
    assert manifest.files == LEGACY_IMAGE["files"] and manifest.extra["format_version"] == 1
    assert "classes" not in manifest.to_dict() and manifest.to_dict()["image"]["classes"] == ["0", "1"]


def test_legacy_text_manifest_loads_without_image_facts() -> None:
    manifest = DatasetManifest.from_dict(LEGACY_TEXT)
    assert manifest.image is None
    assert manifest.classes == [] and manifest.class_counts == {} and manifest.image_shape is None
    assert manifest.extra["context_words"] == 16


def test_text_manifest_carries_no_image_fields(tiny_text: DatasetManifest) -> None:
    stored = json.loads((Path(tiny_text.examples_dir) / MANIFEST_NAME).read_text())
    assert not {"image", "classes", "class_counts", "image_shape"} & set(stored), sorted(stored)
    split = stored["extra"]["split"]  # 12 windows, (40 - 6) // 3 + 1, less the dropped gap windows
    assert stored["num_examples"] == tiny_text.num_examples == 12 - split["gap_windows_total"]
    assert split["train_windows_total"] + split["eval_windows_total"] == tiny_text.num_examples
    assert stored["extra"]["format_version"] == text_sources.FORMAT_VERSION
    assert DatasetManifest.from_dict(stored) == tiny_text


def test_malformed_image_facts_name_the_file(tmp_path: Path) -> None:
    broken = dict(LEGACY_IMAGE, image={"classes": ["a"]})
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(broken))
    with pytest.raises(DataError) as exc:
        DatasetManifest.from_json(tmp_path / MANIFEST_NAME)
    assert str(tmp_path / MANIFEST_NAME) in str(exc.value) and "image facts" in str(exc.value)


def test_dataset_prepared_by_the_previous_version_still_loads(tmp_path: Path) -> None:
    """A prepared directory whose manifest.json is in the old layout is still used as is."""
    manifest = prepare_image_dataset(None, tmp_path / "cache")
    path = Path(manifest.examples_dir) / MANIFEST_NAME
    old = manifest.to_dict()
    old.update(old.pop("image"))  # the old layout: image fields at the top level
    path.write_text(json.dumps(old))
    assert load_cached(tmp_path / "cache", manifest.fingerprint) == manifest
    # ... and as a TFRecord source, whose image shape comes from the manifest beside it.
    again = prepare_image_dataset(manifest.examples_dir, tmp_path / "again")
    assert again.image == manifest.image and again.num_examples == 1797


def test_format_version_is_part_of_the_cache_address(tmp_path: Path) -> None:
    """A dataset of an older format is never reused: it lives under another fingerprint."""
    def plan(version: int) -> SourcePlan[list[int]]:
        return SourcePlan(kind="numbers", description="three numbers",
                          fingerprint=source_fingerprint(version, "numbers"),
                          load=lambda scratch: [1, 2, 3])

    def convert(values: list[int]) -> Conversion:
        examples = [tf.train.Example() for _ in values]
        return Conversion(examples=examples, num_shards=shard_count(len(values), 2),
                          extra={"count": len(values)})

    first, reused = prepare(plan(1), tmp_path, "numbers", 1, convert)
    assert not reused and first.num_examples == 3 and len(first.files) == 2
    assert first.image is None and first.extra == {"source_kind": "numbers", "format_version": 1,
                                                   "count": 3}
    second, reused = prepare(plan(2), tmp_path, "numbers", 2, convert)
    assert not reused and second.examples_dir != first.examples_dir
    assert prepare(plan(2), tmp_path, "numbers", 2, convert) == (second, True)
    assert not list(tmp_path.glob("*/scratch")) and not list(tmp_path.glob(".*"))
