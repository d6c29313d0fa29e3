"""Compile the same graph for Kubeflow Pipelines (KFP v2 spec) with KubeflowV2DagRunner.

Choices (TFX 1.16 traps included):
- ``use_pipeline_spec_2_1=True``: with spec 2.0 the container entrypoint reads execution
  properties only from the deprecated ``inputs.parameters``; an open-source KFP v2
  backend fills ``parameterValues``, which only the 2.1 path reads.
- Runtime parameters (data path, epochs, learning rate, gate thresholds) are added to the
  spec after TFX's compiler, typed (pipeline/kubeflow/runtime_parameters.py); every other
  value is a compile-time constant.
- Model code is referenced by dotted path and baked into the image (kubeflow/Dockerfile),
  so no module file has to be found in the container.
- The baseline is read from the serving dir by our Evaluator (components/evaluator.py),
  since TFX's Resolver compiles to a step only Vertex AI implements; ``--warm-start``'s
  Resolver is replaced by a step that reads the serving dir too (pipeline/kubeflow/warm_start_step.py).
- A step after the Evaluator gives the KFP UI metrics, a confusion matrix and a report
  (pipeline/kubeflow/report_step.py).
- Retries only for a backend that honours them (pipeline/kubeflow/backend_version.py).
- Every step runs ``pipeline/kubeflow/entrypoint.py`` (``default_commands``), which fixes
  what a KFP backend passes before TFX's own entrypoint runs (stackenv/compat.py).
- The pipeline root is recorded in the package (``defaultPipelineRoot``, which TFX's YAML
  writer drops) and must be storage a pod can write (pipeline/kubeflow/storage.py).
- A ``minio://`` root (KFP's bundled store) stays the launcher's root, while the graph's own
  paths (serving dir, data) become ``s3://`` and every step gets the store's secret as env
  (pipeline/kubeflow/bundled_store.py).
- A step before the ExampleGen lists its input with KFP caching off, so the ExampleGen's
  cache key changes when the data does (pipeline/kubeflow/fresh_data.py).
"""
import dataclasses
import functools
import json
import logging
import os
import tempfile

from stackenv.compat import with_default_pipeline_root
from stackenv.errors import MissingInput

import yaml
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from data.tfrecords import MANIFEST_NAME, DatasetManifest
from pipeline.config import PipelineConfig
from pipeline.families import get_family
from pipeline.graph import StepLaunchers, create_pipeline
from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.backend_version import DEFAULT_KFP_VERSION, add_retries, parse_version, require
from pipeline.kubeflow.entrypoint import COMMAND
from pipeline.kubeflow.fresh_data import add_input_resolution
from pipeline.kubeflow.platform import StepSettings, apply_step_settings, pinned_image
from pipeline.kubeflow.report_step import add_report_step
from pipeline.kubeflow.runtime_parameters import add_runtime_parameters
from pipeline.kubeflow.warm_start_step import replace_resolvers

log = logging.getLogger("pipeline")

# Where kubeflow/Dockerfile prepares the bundled data sets inside the image.
IMAGE_DATA_ROOT = "/opt/tfx-data/data"


def default_package_path(config: PipelineConfig) -> str:
    return os.path.join("kubeflow", f"{config.pipeline_name}.yaml")


def dataset_for_cluster(config: PipelineConfig, prepare_locally) -> DatasetManifest | None:
    """The dataset as the cluster will read it; None with ``--ingest example-gen`` (the default):
    the spec carries the ``--data`` URI and the pipeline's ExampleGen reads it on the cluster, so
    nothing is read here.

    With ``--ingest prepare``, ``--data`` must name a prepared dataset directory (it holds ``manifest.json``), local
    or on object storage; without ``--data`` the bundled default baked into the image is
    used: it is prepared locally only to read its manifest (preparation is deterministic,
    so the image holds the same files under the same fingerprint).
    """
    import tensorflow as tf

    if config.ingests_in_pipeline():
        return None
    if config.data:
        manifest_path = os.path.join(config.data, MANIFEST_NAME)
        if not tf.io.gfile.exists(manifest_path):
            raise MissingInput(
                f"{config.data} is not a prepared dataset (no {MANIFEST_NAME}). On Kubeflow the pipeline "
                "reads prepared TFRecords: run `python -m pipeline prepare --data SOURCE --output out`, copy "
                "the printed directory to object storage (e.g. gsutil cp -r), and pass that URI as --data.")
        with tf.io.gfile.GFile(manifest_path) as handle:
            dataset = DatasetManifest.from_dict(json.load(handle))
        dataset.examples_dir = config.data
        return dataset
    with tempfile.TemporaryDirectory(prefix="compile-data-") as local_output:
        dataset = prepare_locally(dataclasses.replace(config, output_dir=local_output))
    dataset.examples_dir = f"{IMAGE_DATA_ROOT}/{os.path.basename(dataset.examples_dir.rstrip('/'))}"
    return dataset


def kfp_pipeline_root(config: PipelineConfig) -> str:
    """The KFP run's root: KFP appends ``<pipeline>/<run id>/<task>/<output>``, so a run's
    artifacts land in ``<--pipeline-root>/tfx/<pipeline>/<run id>/``, beside ``serving/``
    as in a local run's output directory."""
    return f"{config.output_dir.rstrip('/')}/tfx"


def readable_paths(config: PipelineConfig) -> PipelineConfig:
    """The config with its ``minio://`` paths as the steps' TensorFlow and Beam read them (``s3://``)."""
    return dataclasses.replace(
        config, output_dir=bundled_store.readable_uri(config.output_dir),
        data=bundled_store.readable_uri(config.data) if config.data else config.data,
        schema_file=bundled_store.readable_uri(config.schema_file) if config.schema_file else config.schema_file)


def store_settings(settings: StepSettings, launcher_root: str) -> StepSettings:
    """On the bundled store every step gets its secret's keys as env (what the launcher itself uses)."""
    if not launcher_root.startswith(bundled_store.SCHEME):
        return settings
    return dataclasses.replace(settings, s3_secret=settings.s3_secret or bundled_store.SECRET, bundled_store=True)


def training_job_launchers(config: PipelineConfig) -> StepLaunchers:
    """``--trainer-workers``/``--tune-workers`` > 1: the step's function becomes a launcher that creates a
    training job of that many pods and waits for it (pipeline/kubeflow/training/); otherwise it runs in the step."""
    launchers = StepLaunchers()
    if config.trainer_workers > 1:
        from pipeline.kubeflow.training import trainer_launcher

        launchers = dataclasses.replace(launchers, trainer=functools.partial(
            _with_job, trainer_launcher.launcher_config, config.trainer_workers, config.trainer_job_timeout))
    if config.tune_workers > 1:
        from pipeline.kubeflow.training import tuner_launcher

        launchers = dataclasses.replace(launchers, tuner=functools.partial(
            _with_job, tuner_launcher.launcher_config, config.tune_workers, config.tune_job_timeout))
    return launchers


def _with_job(launcher_config, workers: int, timeout_s: int, function: str, custom_config: dict) -> tuple[str, dict]:
    return launcher_config(function, custom_config, workers, timeout_s)


def check_backend_options(retries: int, kfp_version: str) -> None:
    """What the target backend cannot honour, refused before anything is compiled."""
    parse_version(kfp_version)
    if retries:
        require("retries", f"--retries {retries}", kfp_version)


def compile_pipeline(config: PipelineConfig, dataset: DatasetManifest | None, image: str,
                     package_path: str | None = None, settings: StepSettings | None = None, *,
                     retries: int = 0, kfp_version: str = DEFAULT_KFP_VERSION) -> str:
    """Write the KFP v2 PipelineSpec YAML (what ``kfp.Client().upload_pipeline`` takes) and return its path.

    Args:
        config: the run's settings; its data and output are object-store URIs the pods can read.
        dataset: prepared data (``--ingest prepare``), or None: the ExampleGen reads ``config.data`` in the cluster.
        image: the pipeline image (kubeflow/Dockerfile) as pushed, ideally ``NAME@sha256:DIGEST``.
        package_path: where to write it (default: ``kubeflow/<pipeline name>.yaml``).
        settings: the pods' resources, secrets and placement; the Kubernetes platform spec becomes the
            package's second document when they need one.
        retries: each step's retries on failure, for a backend of ``kfp_version`` that honours them.
        kfp_version: the Kubeflow Pipelines backend the package is for (tested: ``backend_version.TESTED_VERSIONS``).
    """
    check_backend_options(retries, kfp_version)
    image = pinned_image(image)
    package_path = package_path or default_package_path(config)
    launcher_root = kfp_pipeline_root(config)  # minio:// stays: the launcher opens it itself
    config = readable_paths(config)
    settings = store_settings(settings or StepSettings(), launcher_root)
    pipeline = create_pipeline(config, dataset,
                               beam_pipeline_args=config.beam_pipeline_args(dataset.num_examples if dataset else 0),
                               launchers=training_job_launchers(config))
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image=image, default_commands=list(COMMAND), use_pipeline_spec_2_1=True))
    spec = with_default_pipeline_root(runner.run(pipeline, write_out=False), launcher_root)
    spec = add_input_resolution(spec)  # the ExampleGen's cache key includes its input's listing
    spec = replace_resolvers(spec, config.serving_model_dir, image)  # --warm-start: no Resolver on KFP
    spec = add_report_step(spec, config.model, with_confusion_matrix=bool(get_family(config.model).class_vocabulary))
    spec = add_runtime_parameters(spec, config)
    spec = add_retries(spec, retries, kfp_version)
    platform = apply_step_settings(spec, settings)
    if config.trainer_workers > 1:  # the Trainer step launches a TFJob (pipeline/kubeflow/training/tfjob_step.py)
        from pipeline.kubeflow.training.tfjob_step import apply_trainer_workers

        apply_trainer_workers(spec, image, settings)
    if config.tune_trials and config.tune_workers > 1:  # the Tuner step launches a TFJob (training/tuner_launcher.py)
        from pipeline.kubeflow.training.tfjob_step import apply_tune_workers

        apply_tune_workers(spec, image, settings)
    directory = os.path.dirname(os.path.abspath(package_path))
    os.makedirs(directory, exist_ok=True)
    with open(package_path, "w") as handle:
        handle.write(f"# {config.pipeline_name}: TFX pipeline compiled for Kubeflow Pipelines v2 "
                     "(python -m pipeline compile).\n")
        yaml.safe_dump_all([spec] + ([platform] if platform else []), handle, sort_keys=True)
    return package_path
