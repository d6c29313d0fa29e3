"""TFX's FileBasedDriver (spans, input fingerprint), with the fingerprint extended to the whole tree.

Why: the ExampleGens read a source root recursively (class folders, nested images), while
TFX fingerprints only what the split pattern matches; the extra part makes a changed image
anywhere below the root a cache miss. Local runs call it as the ExampleGen's driver; on
Kubeflow the compiled pipeline's input-resolution step calls :func:`resolve_input` (the same
code) and hands its results to the ExampleGen as parameters (pipeline/kubeflow/fresh_data.py).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf
from tfx.components.example_gen import driver, utils
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.ingest_config import source_root, tree_fingerprint
from data.errors import DataError

#: ``input_base`` values that name data inside the image's own packages (nothing to list).
BUNDLED_PREFIX = "bundled:"


class TreeFingerprintDriver(driver.FileBasedDriver):
    def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
        base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        try:
            try:
                resolved = super().resolve_exec_properties(dict(exec_properties), pipeline_info, component_info)
            # TFX stats every top-level entry: a symlink loop raises; TFX lists names as UTF-8 strictly, so a
            # name whose bytes are not UTF-8 raises UnicodeError (the tree fingerprint below covers both)
            except (tf.errors.OpError, OSError, UnicodeError):
                resolved = _without_span(dict(exec_properties))
                if resolved is None:
                    raise
            exec_properties = resolved
        except ValueError as error:  # TFX's span resolution: no match, or a pattern it cannot use
            config = exec_properties[standard_component_specs.INPUT_CONFIG_KEY]
            raise DataError(
                f"The input pattern of the ExampleGen matches nothing usable under {base} ({error}; input "
                f"config {' '.join(str(config).split())}). With --span-pattern, --data must hold folders "
                "named by the pattern with a number for {SPAN} (e.g. span-1/, span-2/), and --spans A-B "
                "must name spans that exist; check the folder names, or leave --span-pattern out to read "
                "--data as it is.") from error
        config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], config)
        roots = sorted({source_root(base, split.pattern) for split in config.splits})
        extra = "\n".join(filter(None, (tree_fingerprint(root) for root in roots)))
        if extra:
            key = utils.FINGERPRINT_PROPERTY_NAME
            exec_properties[key] = f"{exec_properties.get(key) or ''}\n{extra}"
        return exec_properties


def _without_span(exec_properties: dict[str, Any]) -> dict[str, Any] | None:
    """What TFX's driver sets for an input without ``{SPAN}``/``{VERSION}`` (span 0, the pattern as
    it is), for a folder whose top level TFX's own fingerprint cannot stat; None with a span spec.
    The fingerprint is then the tree's alone (``tree_fingerprint``, which names such entries)."""
    config = example_gen_pb2.Input()
    proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], config)
    if any(any(utils.verify_split_pattern_specs(split)) for split in config.splits):
        return None
    exec_properties[utils.SPAN_PROPERTY_NAME] = 0
    exec_properties[utils.VERSION_PROPERTY_NAME] = None
    exec_properties[utils.FINGERPRINT_PROPERTY_NAME] = ""
    return exec_properties


def resolve_input(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` as the ExampleGen's driver leaves them: ``input_config`` with
    ``{SPAN}``/``{VERSION}`` replaced, and ``span``, ``version`` (None without ``{VERSION}``)
    and ``input_fingerprint`` added. For orchestrators that run no TFX driver (Kubeflow).

    An ``input_base`` that cannot be read (missing, no permission, no credentials) is a
    :class:`DataError` naming it, before TFX's listing would read it as "no files".
    """
    import tensorflow as tf

    base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    if not str(base).startswith(BUNDLED_PREFIX):
        try:
            found = tf.io.gfile.exists(base)
            if found:
                tf.io.gfile.listdir(base) if tf.io.gfile.isdir(base) else tf.io.gfile.stat(base)
        except UnicodeError:
            pass  # listed: a name whose bytes are not UTF-8, which TF's listing cannot decode (data.walk reads it)
        except (tf.errors.OpError, OSError) as error:
            raise DataError(
                f"The ExampleGen's input {base} cannot be read from this step: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}. "
                "Check that the URI is right and that the step's pod can read it (bucket permissions, "
                "the credentials in the secrets compiled in with --s3-secret or --secret-env, "
                "--s3-endpoint for S3/MinIO).") from error
        if not found:
            raise DataError(
                f"The ExampleGen's input {base} does not exist (seen from the step that lists the input "
                "before the ExampleGen runs). Upload the data there, or compile with --data naming where "
                "it is (a gs:// or s3:// URI the pods can read, or a path inside the image).")
    return TreeFingerprintDriver(None).resolve_exec_properties(dict(exec_properties), None, None)
