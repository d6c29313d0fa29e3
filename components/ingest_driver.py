"""TFX's FileBasedDriver (spans, input fingerprint), with the fingerprint extended to the whole tree.

Why: the ExampleGens read a source root recursively (class folders, nested images), while
TFX fingerprints only what the split pattern matches; the extra part makes a changed image
anywhere below the root a cache miss. Used by local runs; on Kubeflow the driver hook of the
compiled spec is TFX's own (kubeflow/README.md, "Not done").
"""
from __future__ import annotations

from tfx.components.example_gen import driver, utils
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.ingest_config import source_root, tree_fingerprint


class TreeFingerprintDriver(driver.FileBasedDriver):
    def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
        exec_properties = super().resolve_exec_properties(exec_properties, pipeline_info, component_info)
        config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], config)
        base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        roots = sorted({source_root(base, split.pattern) for split in config.splits})
        extra = "\n".join(filter(None, (tree_fingerprint(root) for root in roots)))
        if extra:
            key = utils.FINGERPRINT_PROPERTY_NAME
            exec_properties[key] = f"{exec_properties.get(key) or ''}\n{extra}"
        return exec_properties
