"""Whole-data facts computed inside the pipeline: properties of the Examples artifact.

Why: the class list, the image shape and the split counts used to come from the prepare
step's manifest, read when the graph was built, so ``compile`` had to read the data. Now
the ExampleGen computes them with Beam while it ingests and records them as custom
properties of its Examples artifact (``classes``, ``image_shape``, ``split_counts``,
``num_examples``, ...), where ML Metadata and the Kubeflow UI show them and where they
travel to the next step as any artifact property does (a KFP launcher hands them on as the
artifact's metadata). Transform passes them on as properties of its outputs, the Trainer's
and the Tuner's only view of the data.

A step that needs them reads them by name and hands them to the model code under one
key, ``custom_config["data_facts"]`` (``data.manifest.FACTS_KEY``); a graph built from prepared
data (ImportExampleGen, no properties) puts the prepared manifest's facts under the same
key at compile time, so the model code has one place to look. Step budgets left at 0 by the
graph are decided from ``split_counts`` (:func:`steps`), and an eval config's class-count
slots from ``classes`` (:func:`fill_eval_config`).
"""
from __future__ import annotations

import json
import math
from typing import Any

from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2

from data.manifest import FACTS_KEY

#: The facts an ExampleGen records, each a custom property of its Examples artifact.
PROPERTIES = ("kind", "classes", "class_counts", "image_shape", "split_counts", "num_examples",
              "split", "stride", "unused", "corpus")
#: Where an ExampleGen's Beam pipeline leaves the facts for its executor to publish (then deleted).
_STAGED_FILE = ".data_facts.json"
#: exec_properties keys the ExampleGen executors use internally (never in a spec).
FACTS_URI_KEY = "_data_facts_uri"


def _staged_path(uri: str) -> str:
    return f"{uri.rstrip('/')}/{_STAGED_FILE}"


def publish_staged(examples) -> dict[str, Any] | None:
    """Record the facts the ExampleGen's Beam pipeline staged beside ``examples`` (a TFX Examples
    artifact) as its custom properties, and remove the staged file."""
    import tensorflow as tf

    path = _staged_path(examples.uri)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        facts = json.loads(handle.read())
    tf.io.gfile.remove(path)
    publish(examples, facts)
    return facts


def publish(artifact, facts: dict[str, Any]) -> None:
    """``facts`` as custom properties of ``artifact`` (a TFX artifact), one per fact, each as JSON text.

    Text, not TFX's JSON properties: a KFP launcher stores a list as ``{"list": [...]}`` and a
    mapping as ``{"struct": {...}}`` and hands them on wrapped so (backend/src/v2/metadata/
    converter.go StructValueToMLMDValue@2.17.0), while a string travels as it is.
    """
    for name in PROPERTIES:
        if name in facts:
            artifact.set_string_custom_property(name, json.dumps(facts[name], sort_keys=True))


def facts_of(artifact) -> dict[str, Any] | None:
    """The facts recorded on a TFX artifact or an MLMD ``Artifact`` proto; None when it has none
    (data ingested by ImportExampleGen)."""
    proto = artifact if isinstance(artifact, metadata_store_pb2.Artifact) else artifact.mlmd_artifact
    texts = {name: _text(proto.custom_properties[name]) for name in PROPERTIES if name in proto.custom_properties}
    if "num_examples" not in texts:
        return None
    return {name: json.loads(text) for name, text in texts.items()}


def _text(value: metadata_store_pb2.Value) -> str:
    """A string property as set locally, or as a KFP step's inputs carry it (TFX's entrypoint wraps
    every metadata value in a Struct: ``{"__value__": text}``)."""
    if value.WhichOneof("value") == "struct_value":
        return str(json_format.MessageToDict(value.struct_value)["__value__"])
    return value.string_value


def with_facts(custom_config: dict[str, Any], facts: dict[str, Any] | None) -> dict[str, Any]:
    """``custom_config`` with the facts under ``FACTS_KEY`` (those the graph put there win)."""
    if not facts or custom_config.get(FACTS_KEY):
        return custom_config
    return {**custom_config, FACTS_KEY: facts}


def steps(num_steps: int, examples: int, batch_size: int, epochs: int = 1) -> int:
    """A step budget left at 0 by the graph: ``epochs`` passes over ``examples``."""
    if num_steps:
        return num_steps
    return max(1, epochs * math.ceil(examples / max(1, batch_size)))


def fill_eval_config(eval_config_json: str, facts: dict[str, Any]) -> str:
    """The eval config with empty binarized class ids and ``"num_classes": 0`` set from the class list."""
    classes = facts.get("classes") or []
    if not classes:
        return eval_config_json
    config = json.loads(eval_config_json)
    for spec in config.get("metrics_specs", config.get("metricsSpecs", [])):
        binarize = spec.get("binarize")
        if binarize is not None:
            ids = binarize.setdefault("class_ids", binarize.pop("classIds", {}))
            if not ids.get("values"):
                ids["values"] = list(range(len(classes)))
        for metric in spec.get("metrics", []):
            raw = metric.get("config")
            if raw:
                values = json.loads(raw)
                if values.get("num_classes") == 0:
                    values["num_classes"] = len(classes)
                    metric["config"] = json.dumps(values)
    return json.dumps(config)


def manifest_from_facts(facts: dict[str, Any], source: str):
    """A DatasetManifest for the run summary, from the facts an ExampleGen wrote."""
    from data.manifest import DatasetManifest, ImageFacts

    image = None
    if facts.get("classes"):
        image = ImageFacts(classes=list(facts["classes"]), class_counts=dict(facts.get("class_counts") or {}),
                           image_shape=list(facts.get("image_shape") or []))
    return DatasetManifest(kind=facts.get("kind", "image" if image else "text"), source=source,
                           num_examples=int(facts.get("num_examples", 0)), fingerprint="", examples_dir=source,
                           image=image,
                           extra={k: v for k, v in facts.items() if k in ("split", "stride", "unused", "corpus")})


def attach_facts(splits: dict, exec_properties: dict[str, Any], extra=None) -> None:
    """Add to an ExampleGen's Beam pipeline: count each split, merge with ``extra`` (a
    one-element PCollection of a dict, e.g. the corpus; None: the counts alone) and stage
    the facts for :func:`publish_staged`."""
    import apache_beam as beam

    uri = exec_properties.get(FACTS_URI_KEY)
    if not uri:
        return
    counts = [pcoll | f"Count[{name}]" >> beam.combiners.Count.Globally()
              | f"Name[{name}]" >> beam.Map(lambda count, name=name: (name, count))
              for name, pcoll in splits.items()]

    def facts(split_counts: list[tuple[str, int]], extra_facts: dict) -> dict:
        by_split = dict(split_counts)
        return {**extra_facts, "split_counts": by_split, "num_examples": sum(by_split.values())}

    (counts | "FactsCounts" >> beam.Flatten() | "FactsCountList" >> beam.combiners.ToList()
     | "Facts" >> beam.Map(facts, beam.pvalue.AsSingleton(extra) if extra is not None else {})
     | "StageFacts" >> beam.Map(lambda value: _stage(uri, value)))


def _stage(uri: str, facts: dict[str, Any]) -> None:
    import tensorflow as tf

    tf.io.gfile.makedirs(uri)
    with tf.io.gfile.GFile(_staged_path(uri), "w") as handle:
        handle.write(json.dumps(facts, sort_keys=True))


def with_facts_uri(output_dict: dict, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """exec_properties plus where this ExampleGen writes its facts (its examples artifact)."""
    from tfx.types import artifact_utils, standard_component_specs

    examples = artifact_utils.get_single_instance(output_dict[standard_component_specs.EXAMPLES_KEY])
    return {**exec_properties, FACTS_URI_KEY: examples.uri}


def facts_from_manifest(dataset) -> dict[str, Any]:
    """The facts of data prepared before the graph was built (its manifest); empty when pending."""
    if dataset is None or dataset.kind == "pending":
        return {}
    facts: dict[str, Any] = {"kind": dataset.kind, "num_examples": int(dataset.num_examples)}
    if dataset.image is not None:
        facts.update(classes=list(dataset.image.classes), class_counts=dict(dataset.image.class_counts),
                     image_shape=list(dataset.image.image_shape))
    return facts


def pending_manifest(source: str | None):
    """What a graph built without the data passes to the family's config functions: every
    data-dependent value empty; the steps hand the model code the facts the ExampleGen records."""
    from data.manifest import DatasetManifest, ImageFacts

    return DatasetManifest(kind="pending", source=source or "", num_examples=0, fingerprint="", examples_dir="",
                           image=ImageFacts(classes=[], class_counts={}, image_shape=[]))
