"""Schema curation the families share: what an inferred schema keeps before it is pinned (pipeline/local/schema_pin.py).

SchemaGen records every string value it saw as the feature's domain; for ids and documents new values
are normal, so pinning them would stop every later run on new data as drift.
"""
from tensorflow_metadata.proto.v0 import schema_pb2


def keep_string_domains(schema: schema_pb2.Schema, features) -> None:
    """Drop inferred value lists except for ``features``: the ones whose values are a closed set."""
    keep = set(features)
    for feature in schema.feature:
        if feature.HasField("domain") and feature.name not in keep:
            feature.ClearField("domain")
    used = {f.domain for f in schema.feature if f.HasField("domain")}
    kept = [d for d in schema.string_domain if d.name in used]
    del schema.string_domain[:]
    schema.string_domain.extend(kept)
