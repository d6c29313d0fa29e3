"""The description of a prepared dataset: facts every dataset has, plus typed family facts.

The pipeline reads prepared data only through :class:`DatasetManifest`. Fields every
dataset has (where the shards are, how many examples, what they were made from) sit at
the top; what only one family needs (an image classifier's classes and image shape) is a
typed, optional part, so a text dataset carries no blank image fields. ``extra`` keeps
free-form provenance (source kind, format version, per-source details) for people and
reports, never for code that must rely on it.

Manifests written before the family parts existed (``classes``, ``class_counts`` and
``image_shape`` at the top level) still load: :meth:`DatasetManifest.from_dict` moves
those fields into the image part.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from data.errors import DataError

MANIFEST_NAME = "manifest.json"
#: The ``custom_config`` key under which a step hands the model code the data's facts
#: (components/data_facts.py: from the Examples artifact's properties, or the graph's manifest).
FACTS_KEY = "data_facts"
SHARD_PATTERN = "*.tfrecord.gz"
# Top-level keys of manifests written before the image facts became a part of their own.
_LEGACY_IMAGE_KEYS = ("classes", "class_counts", "image_shape")


def facts_in(custom_config: dict[str, Any] | None) -> dict[str, Any]:
    """The data's facts a step handed over in ``custom_config`` (empty when it had none)."""
    return dict((custom_config or {}).get(FACTS_KEY) or {})


def image_shape_in(custom_config: dict[str, Any] | None) -> list[int]:
    """The image shape (H, W, C) of the data a step was handed; a clear error when it was not."""
    shape = facts_in(custom_config).get("image_shape")
    if not shape:
        raise DataError(f"No image shape in the step's {FACTS_KEY!r}: the ExampleGen records it on its Examples "
                        "artifact and Transform passes it on; run the whole pipeline (or --ingest prepare).")
    return [int(v) for v in shape]


@dataclasses.dataclass
class ImageFacts:
    """What an image classifier needs before training: the classes and one image shape."""

    classes: list[str]  # sorted; a label's id is its index
    class_counts: dict[str, int]
    image_shape: list[int]  # [height, width, channels]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageFacts:
        return cls(
            classes=[str(c) for c in data["classes"]],
            class_counts={str(k): int(v) for k, v in dict(data["class_counts"]).items()},
            image_shape=[int(v) for v in data["image_shape"]],
        )


@dataclasses.dataclass
class DatasetManifest:
    """Description of a prepared dataset; the pipeline reads data only through it."""

    kind: str  # e.g. "image" or "text"; only an "image" dataset has the image part
    source: str
    num_examples: int
    fingerprint: str
    examples_dir: str
    file_pattern: str = SHARD_PATTERN
    files: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    image: ImageFacts | None = None

    # Read-only views for callers that do not care which family they hold: a dataset
    # without image facts has no classes and no image shape.
    @property
    def classes(self) -> list[str]:
        return list(self.image.classes) if self.image else []

    @property
    def class_counts(self) -> dict[str, int]:
        return dict(self.image.class_counts) if self.image else {}

    @property
    def image_shape(self) -> list[int] | None:
        return list(self.image.image_shape) if self.image else None

    @property
    def examples_glob(self) -> str:
        """Absolute glob of the TFRecord shards."""
        return os.path.join(self.examples_dir, self.file_pattern)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if data["image"] is None:
            del data["image"]
        return data

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the manifest atomically, so a reader never sees a half-written file."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetManifest:
        """Build from JSON data, in the current format or the one before the family parts."""
        data = dict(data)
        legacy = {k: data.pop(k) for k in _LEGACY_IMAGE_KEYS if k in data}
        image = data.pop("image", None)
        if image is None and legacy.get("image_shape"):
            image = legacy  # Written before the image part: move its fields into it.
        names = {f.name for f in dataclasses.fields(cls)}
        manifest = cls(**{k: v for k, v in data.items() if k in names})
        if image is not None:
            try:
                manifest.image = ImageFacts.from_dict(image)
            except (KeyError, ValueError, TypeError, AttributeError) as exc:
                raise TypeError(f"its image facts are incomplete or malformed ({exc!r})") from exc
        return manifest

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> DatasetManifest:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(
                f"Dataset manifest {path} cannot be read ({exc}). It is written last when "
                "a dataset is prepared, so it should only be damaged by hand edits or a "
                "full disk: delete its directory and prepare the data again."
            ) from exc


def stored_image_shape(data: dict[str, Any]) -> list[int]:
    """``image_shape`` from manifest JSON in either format (KeyError when it has none)."""
    image = data.get("image")
    if isinstance(image, dict) and "image_shape" in image:
        return image["image_shape"]
    return data["image_shape"]
