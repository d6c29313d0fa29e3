"""Whole-data facts computed inside the pipeline, and the slots downstream steps fill with them.

Why: the class list, the image shape and the split counts used to come from the prepare
step's manifest, read when the graph was built, so ``compile`` had to read the data. Now
the ExampleGen computes them with Beam while it ingests and writes ``data_facts.json``
beside its splits; Transform copies the file into its graph output (the Trainer's input);
and each executor fills the empty slots the graph left for them at compile time:

* ``class_names`` / ``image_shape`` anywhere in a ``custom_config`` left empty;
* TrainArgs / EvalArgs with ``num_steps == 0``: epochs x train examples / batch size, and
  eval examples / batch size (the counts are real, not an estimate from the bucket ratio);
* an eval config's class-count slots (binarized class ids, ``"num_classes": 0``).

A slot the graph already filled (data known at compile time, an explicit flag) is kept.
"""
from __future__ import annotations

import json
import math
from typing import Any

import tensorflow as tf

FACTS_FILE = "data_facts.json"
#: exec_properties keys the ExampleGen executors use internally (never in a spec).
FACTS_URI_KEY = "_data_facts_uri"
FACTS_EXTRA_KEY = "_data_facts_extra"

_FILLED_KEYS = {"class_names": "classes", "image_shape": "image_shape"}


def write_facts(uri: str, facts: dict[str, Any]) -> None:
    tf.io.gfile.makedirs(uri)
    with tf.io.gfile.GFile(f"{uri.rstrip('/')}/{FACTS_FILE}", "w") as handle:
        handle.write(json.dumps(facts, sort_keys=True, indent=1))


def read_facts(uri: str) -> dict[str, Any] | None:
    """The facts beside an artifact's files, or None (data ingested by ImportExampleGen)."""
    path = f"{uri.rstrip('/')}/{FACTS_FILE}"
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.loads(handle.read())


def fill_custom_config(config: Any, facts: dict[str, Any]) -> Any:
    """``config`` with its empty ``class_names`` / ``image_shape`` slots (at any depth) filled."""
    if isinstance(config, dict):
        out = {}
        for key, value in config.items():
            fact = _FILLED_KEYS.get(key)
            if fact and not value and facts.get(fact):
                out[key] = list(facts[fact])
            else:
                out[key] = fill_custom_config(value, facts)
        return out
    if isinstance(config, list):
        return [fill_custom_config(v, facts) for v in config]
    return config


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


def attach_facts(splits: dict, exec_properties: dict[str, Any], extra) -> None:
    """Add to an ExampleGen's Beam pipeline: count each split, merge with ``extra`` (a
    one-element PCollection of a dict, e.g. the class list) and write the facts file."""
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
     | "Facts" >> beam.Map(facts, beam.pvalue.AsSingleton(extra))
     | "WriteFacts" >> beam.Map(lambda value: write_facts(uri, value)))


def with_facts_uri(output_dict: dict, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """exec_properties plus where this ExampleGen writes its facts (its examples artifact)."""
    from tfx.types import artifact_utils, standard_component_specs

    examples = artifact_utils.get_single_instance(output_dict[standard_component_specs.EXAMPLES_KEY])
    return {**exec_properties, FACTS_URI_KEY: examples.uri}


def pending_manifest(source: str | None):
    """What a graph built without the data passes to the family's config functions: every
    data-dependent value empty, so each becomes a slot the executors fill from the facts."""
    from data.manifest import DatasetManifest, ImageFacts

    return DatasetManifest(kind="pending", source=source or "", num_examples=0, fingerprint="", examples_dir="",
                           image=ImageFacts(classes=[], class_counts={}, image_shape=[]))
