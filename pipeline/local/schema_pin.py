"""Pin the schema inferred on a first run, so later runs validate new data against it.

Re-inferring the schema every run (SchemaGen's default) can never detect drift: the schema
simply follows the data. The first successful run's schema, curated by the model family
(e.g. pixel range 0-255, which classes exist), is stored content-addressed under
``<output>/schema/<pipeline>/``; later runs import it (ImportSchemaGen) and the strict
ExampleValidator stops them on anomalies. ``--accept-schema-change`` re-infers and re-pins.
Content addressing matters: ImportSchemaGen is cached by file path, so a changed schema
must get a new path.
"""
import hashlib
import os
from collections.abc import Callable

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from pipeline.config import PipelineConfig

CURRENT_POINTER = "CURRENT"


def schema_dir(config: PipelineConfig) -> str:
    return os.path.join(config.output_dir, "schema", config.pipeline_name)


def pinned_schema(config: PipelineConfig) -> str | None:
    pointer = os.path.join(schema_dir(config), CURRENT_POINTER)
    if not tf.io.gfile.exists(pointer):
        return None
    path = os.path.join(schema_dir(config), tf.io.gfile.GFile(pointer).read().strip())
    return path if tf.io.gfile.exists(path) else None


def pin_schema(config: PipelineConfig, inferred_schema_uri: str,
               curate: Callable[[schema_pb2.Schema], None]) -> str:
    """Curate the schema SchemaGen wrote under ``inferred_schema_uri`` and make it current."""
    schema = schema_pb2.Schema()
    text_format.Parse(tf.io.gfile.GFile(os.path.join(inferred_schema_uri, "schema.pbtxt")).read(), schema)
    curate(schema)
    text = text_format.MessageToString(schema)
    name = f"schema-{hashlib.sha256(text.encode()).hexdigest()[:12]}.pbtxt"
    directory = schema_dir(config)
    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(os.path.join(directory, name), "w") as handle:
        handle.write(text)
    with tf.io.gfile.GFile(os.path.join(directory, CURRENT_POINTER), "w") as handle:
        handle.write(name + "\n")
    return os.path.join(directory, name)
