"""A compiled pipeline package as `deploy` reads it: checked, named, rooted, uploaded under a .yaml name.

Why apart from the upload: these are the checks that need no cluster (a wrong file, a root
the package's steps cannot write to), so `deploy` fails on them before it connects, and
their rules (what the API server accepts, which root a run gets) are read from KFP's source
once, here.
"""
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from stackenv import user_files

import yaml

from pipeline.kubeflow.connection import DeployError
from pipeline.kubeflow.fresh_data import override_caching
from pipeline.kubeflow.storage import DEFAULT_KFP_ROOT, KubeflowConfigError, check_pipeline_root

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2.1.0"
#: Top-level keys every KFP v2 PipelineSpec has (kfp's and TFX's compilers both write them).
SPEC_KEYS = ("pipelineInfo", "root", "deploymentSpec", "components", "schemaVersion")


def load_pipeline_spec(package_path: str) -> dict:
    """Parse and sanity-check the package, so a wrong file fails here and not on the server."""
    path = Path(package_path)
    how_to_compile = ("Compile the pipeline with TFX's KubeflowV2DagRunner and an output_filename "
                      "ending in .yaml (e.g. output_filename='pipeline.yaml') and pass that file.")
    if not path.exists():
        raise DeployError(f"Pipeline package {path} does not exist. {how_to_compile}")
    if path.name.endswith((".tar.gz", ".tgz", ".zip")):
        raise DeployError(
            f"Pipeline package {path} is an archive; this command expects the KFP v2 PipelineSpec "
            "YAML itself (TFX's v1 KubeflowDagRunner writes Argo .tar.gz packages, which the KFP v2 "
            f"API cannot run). {how_to_compile}")
    try:
        data = user_files.read_user_bytes(path, flag="Pipeline package", what="a compiled pipeline (YAML)",
                                          max_bytes=user_files.CONFIG_MAX_BYTES)
        documents = list(yaml.safe_load_all(data.decode("utf-8")))
    except user_files.UserFileError as error:
        raise DeployError(f"{error.paragraph} {how_to_compile}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        detail = str(error).strip().replace("\n", " ")
        raise DeployError(f"Pipeline package {path} is not a YAML file ({detail}). "
                          f"{how_to_compile}") from error
    spec = documents[0] if documents else None
    if isinstance(spec, dict) and isinstance(spec.get("pipelineSpec"), dict):
        raise DeployError(
            f"Pipeline package {path} is a Vertex AI PipelineJob (TFX writes that format when "
            "output_filename ends in .json), not a KFP PipelineSpec. " + how_to_compile)
    if isinstance(spec, dict) and spec.get("kind") == "Workflow":
        raise DeployError(
            f"Pipeline package {path} is a KFP v1 Argo Workflow; the KFP v2 API needs a v2 "
            f"PipelineSpec. {how_to_compile}")
    missing = [key for key in SPEC_KEYS if not isinstance(spec, dict) or key not in spec]
    if missing:
        found = ", ".join(sorted(map(str, spec))[:8]) if isinstance(spec, dict) else type(spec).__name__
        raise DeployError(
            f"Pipeline package {path} is not a KFP v2 PipelineSpec: missing top-level "
            f"{', '.join(missing)} (found: {found or 'nothing'}). {how_to_compile}")
    assert isinstance(spec, dict)  # else every key of SPEC_KEYS is missing, raised above
    if str(spec["schemaVersion"]) != SCHEMA_VERSION:
        # The API server accepts exactly 2.1.0 (backend src/apiserver/template/v2_template.go).
        raise DeployError(
            f"Pipeline package {path} has schemaVersion {spec['schemaVersion']!r}; the KFP v2 API "
            f"accepts only {SCHEMA_VERSION} (TFX writes it with KubeflowV2DagRunnerConfig("
            f"use_pipeline_spec_2_1=True), as `python -m pipeline compile` does). {how_to_compile}")
    return spec


def run_pipeline_root(spec: dict, package_path: str, pipeline_root: str | None, run: bool) -> str | None:
    """The root a run of this package writes to: ``pipeline_root``, else the package's own.

    The KFP API server reads only the run's ``runtime_config.pipeline_root`` and otherwise
    falls back to the ``kfp-launcher`` ConfigMap's root or ``minio://mlpipeline/v2/artifacts``
    (backend src/v2/driver/driver.go RootDAG), for which a package compiled for another store
    has no credentials, so a run always gets one, checked first. A root on another store than
    the package's is refused too: the steps' endpoint and keys are compiled in. An upload alone
    only checks a root it has.
    """
    package_root = spec.get("defaultPipelineRoot")
    root = (pipeline_root or "").strip() or package_root
    if not root and not run:
        log.warning("%s records no pipeline root: start its runs with --pipeline-root (KFP would use its "
                    "default, %s).", package_path, DEFAULT_KFP_ROOT)
        return None
    if not root:
        raise DeployError(
            f"{package_path} records no pipeline root and --pipeline-root was not given, so KFP would use "
            f"its default {DEFAULT_KFP_ROOT}, for which this package's steps have no credentials. Recompile "
            "with `python -m pipeline compile --pipeline-root minio://mlpipeline/tfx` (KFP's own store) or "
            "gs://BUCKET/PATH, or pass --pipeline-root.")
    try:
        check_pipeline_root(root, "deploy --pipeline-root" if pipeline_root else
                            f"deploy {package_path} (its defaultPipelineRoot)")
    except KubeflowConfigError as error:
        raise DeployError(str(error)) from error
    if pipeline_root and package_root and _store(root) != _store(package_root):
        raise DeployError(
            f"deploy --pipeline-root {root} is on another store than the one {package_path} was compiled for "
            f"({package_root}): the steps' endpoint and keys are compiled into the package, so its pods could "
            f"not read or write {_store(root)}. Pass a root in {_store(package_root)}, or recompile with "
            f"`python -m pipeline compile --pipeline-root {root}`.")
    return root


def _store(root: str) -> str:
    """scheme://bucket of a root."""
    scheme, _, rest = root.partition("://")
    return f"{scheme}://{rest.split('/')[0]}"


def default_pipeline_name(spec: dict, package_path: str) -> str:
    """``pipelineInfo.name`` (what TFX sets from the pipeline name), else the file stem."""
    name = (spec.get("pipelineInfo") or {}).get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    return Path(package_path).stem


@contextlib.contextmanager
def yaml_named(package_path: str, enable_caching: bool | None = None) -> Iterator[str]:
    """Yield a path ending in .yaml with the package's bytes (caching overridden if asked).

    The KFP server picks the parser by the uploaded file name and (up to 2.0) rejects
    anything not named .yaml/.yml; JSON is valid YAML, so a copy under a .yaml name works.
    """
    if package_path.endswith((".yaml", ".yml")) and enable_caching is None:
        yield package_path
        return
    folder = tempfile.mkdtemp(prefix="kfp-deploy-")
    try:
        target = os.path.join(folder, Path(package_path).stem + ".yaml")
        if enable_caching is None:
            shutil.copyfile(package_path, target)
        else:
            documents = list(yaml.safe_load_all(Path(package_path).read_text(encoding="utf-8")))
            override_caching(documents[0], enable_caching)  # the input-resolution step stays uncached
            with open(target, "w") as handle:
                yaml.safe_dump_all(documents, handle, sort_keys=True)
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)
