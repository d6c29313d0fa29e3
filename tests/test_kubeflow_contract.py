"""Every compiled step of both families, on KFP's bundled store and on an s3:// root elsewhere.

The backend is emulated from its source (tests/support/kfp_contract.py and kfp_launcher.py cite
the files) against a real local S3 server: the run's root comes from the run (what `deploy`
sends), the launcher opens its bucket with the bundled secret (``minio://``) or the
``kfp-launcher`` providers entry that `compile` writes (``s3://``), downloads every input to
the pod's disk and checks the URIs each step hands back; the package's platform spec gives
the steps their keys; upstream artifacts arrive with an empty ``instanceSchema`` and their
MLMD id as name. In the default suite one small run per family (cnn on the bundled store,
seq2seq on an s3:// root with its own endpoint); behind ``slow``, two runs of each family on
each store, the second comparing with the model the first pushed.
"""
import contextlib
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pydoc_data.topics import topics

import pytest
import yaml
from conftest import run_cli
from support import s3_server
from support.kfp_backends import BACKENDS, NEWEST, PROFILE_NAMESPACE, STANDALONE_NAMESPACE, Backend
from support.kfp_contract import EXECUTOR_LOGS, Cluster, TaskFailed, local_path_for_uri, topological_tasks

from pipeline.config import PipelineConfig
from pipeline.families import FAMILIES
from pipeline.kubeflow.compile import (
    IMAGE_DATA_ROOT,
    compile_pipeline,
    dataset_for_cluster,
    kfp_pipeline_root,
    readable_paths,
)
from pipeline.kubeflow.fresh_data import override_caching
from pipeline.kubeflow.launcher_config import launcher_configmap
from pipeline.kubeflow.platform import StepSettings

# Every step a fresh process: far over the suite's default timeout on a busy 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

IMAGE = "registry.example.com/tfx-project:test"
# Small and quick: the contract is what is tested, not the model.
# gate_margin -1: a 20-step model need not beat the reference predictors to exercise the contract.
SETTINGS = {"cnn": dict(train_steps=20, min_accuracy=0.0, max_regression=1.0, gate_margin=-1.0),
            "seq2seq": dict(train_steps=10, family_settings={"vocab_size": 300}, min_accuracy=0.0,
                            max_regression=1.0, gate_margin=-1.0)}
BUNDLED_BUCKET, OTHER_BUCKET, OTHER_SECRET = "mlpipeline", "team-bucket", "store-keys"
ROOTS = {"bundled": f"minio://{BUNDLED_BUCKET}/v2", "s3": f"s3://{OTHER_BUCKET}/tfx"}


def _small_corpus(directory) -> str:
    """Eight documents of ~600 words: enough for a document split, small enough to be quick."""
    os.makedirs(directory, exist_ok=True)
    for name in sorted(topics, key=lambda t: -len(topics[t]))[:8]:
        with open(os.path.join(directory, f"{name}.txt"), "w", encoding="utf-8") as handle:
            handle.write(" ".join(topics[name].split()[:600]))
    return str(directory)


def compile_for_contract(model: str, tmp_path, root: str = None, cache: bool = False,
                         settings: StepSettings | None = None, **config_settings) -> tuple:
    """Compile through the project's compiler (default: a local root); returns
    (spec, platform spec or None, config, image_paths).

    cnn reads the bundled digits inside its ExampleGen step; seq2seq a corpus folder passed as
    --data, as a user of their own data would (both read by the step, nothing at compile time).
    ``cache`` False: every step runs in every run, as after ``deploy --cache off``.
    """
    root = root or str(tmp_path / "root")
    image_paths = {}
    data = config_settings.pop("data", None)
    if model == "seq2seq" and data is None:
        data = _small_corpus(tmp_path / "corpus")  # read by the pipeline's own ExampleGen, as a bucket would be
    config = PipelineConfig(model=model, output_dir=root, data=data, **{**SETTINGS[model], **config_settings})
    dataset = dataset_for_cluster(config, FAMILIES[model].prepare_data)
    if data is None and dataset is not None:  # --ingest prepare: the bundled data baked into the image
        local = FAMILIES[model].prepare_data(PipelineConfig(model=model, output_dir=str(tmp_path / "image")))
        image_paths = {IMAGE_DATA_ROOT: os.path.dirname(local.examples_dir)}
    package = compile_pipeline(config, dataset, IMAGE, str(tmp_path / f"{model}.yaml"), settings)
    with open(package) as handle:
        documents = list(yaml.safe_load_all(handle))
    spec, platform = documents[0], (documents[1] if len(documents) > 1 else None)
    return (spec if cache else override_caching(spec, False)), platform, config, image_paths


@pytest.fixture(scope="module")
def store():
    with s3_server.s3_server(BUNDLED_BUCKET, OTHER_BUCKET) as address:
        yield address


def _upload_corpus(address: str, local: str, bucket: str, prefix: str = "") -> str:
    for name in sorted(os.listdir(local)):
        s3_server.client(address).upload_file(os.path.join(local, name), bucket, f"{prefix}corpus/{name}")
    return f"{prefix}corpus"


# Each package is compiled with --warm-start (a second run's Trainer starts from the first run's pushed model).
# Run 1 is created with other values of the runtime parameters, as `deploy --param` or the KFP UI would
# (pipeline/kubeflow/runtime_parameters.py); run 2 takes the compiled defaults. With this gate margin the
# gate's floor is min_accuracy (components/reference_gate.py: max(min_accuracy, reference + margin)).
# (epochs only sizes the step budget when --train-steps is not given, as here: its folding is unit-tested.)
RUN_PARAMETERS = ({"epochs": 2, "learning_rate": 0.002, "gate_margin": -0.99, "min_accuracy": 0.05,
                   "max_regression": 0.9}, {})


def cluster_and_package(model: str, kind: str, tmp_path, address: str, backend: Backend = NEWEST,
                        namespace: str = STANDALONE_NAMESPACE, keys: Mapping[str, str] = s3_server.BUNDLED_KEYS
                        ) -> tuple:
    """(cluster, spec, platform, config) for a stock KFP of ``backend``'s version with its store (``bundled``),
    or a store elsewhere whose endpoint the package and the launcher's ConfigMap name (``s3``). In a profile
    ``namespace`` (multi-user) the root is one the profile may write (docs/kubeflow/multi-user.md), the
    namespace's ``kfp-launcher`` and ``mlpipeline-minio-artifact`` are the profile controller's, with ``keys``."""
    root = ROOTS[kind] if namespace == STANDALONE_NAMESPACE else f"minio://{BUNDLED_BUCKET}/private-artifacts/{namespace}"
    bucket = BUNDLED_BUCKET if kind == "bundled" else OTHER_BUCKET
    data = None
    if model == "seq2seq":  # the corpus in the store, as a user's data would be
        folder = _upload_corpus(address, _small_corpus(tmp_path / "corpus"), bucket,
                                "" if namespace == STANDALONE_NAMESPACE else f"shared/{namespace}/")
        data = f"{root.split('://')[0]}://{bucket}/{folder}"
    if kind == "bundled":
        spec, platform, config, _ = compile_for_contract(model, tmp_path, root=root, data=data,
                                                          warm_start=True)
        profile_root = backend.profile_pipeline_root(namespace)
        cluster = Cluster(str(tmp_path), store_address=address, backend=backend, namespace=namespace,
                          secrets={"mlpipeline-minio-artifact": dict(keys)},
                          launcher_config=({"defaultPipelineRoot": profile_root} if profile_root else None))
    else:
        endpoint = f"http://{address}"
        settings = StepSettings(s3_endpoint=endpoint, s3_secret=OTHER_SECRET)
        spec, platform, config, _ = compile_for_contract(model, tmp_path, root=root, settings=settings, data=data,
                                                          warm_start=True)
        configmap = launcher_configmap(kfp_pipeline_root(config), endpoint, OTHER_SECRET)
        cluster = Cluster(str(tmp_path), secrets={OTHER_SECRET: s3_server.BUNDLED_KEYS}, backend=backend,
                          launcher_config=configmap["data"])
    return cluster, spec, platform, config


def _versions(address: str, serving_dir: str) -> list[int]:
    bucket, prefix = serving_dir.split("://", 1)[1].split("/", 1)
    return sorted({int(k.split("/")[-2]) for k in s3_server.keys(address, bucket, prefix + "/")
                   if k.endswith("/saved_model.pb") and k.split("/")[-2].isdigit()})


def _bytes_under(address: str, uri: str) -> int:
    bucket, prefix = uri.split("://", 1)[1].split("/", 1)
    pages = s3_server.client(address).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return sum(item["Size"] for page in pages for item in page.get("Contents", []))


MULTI_USER = PROFILE_NAMESPACE


def _case(model: str, kind: str, runs: int, version: str, namespace: str = STANDALONE_NAMESPACE, slow: bool = True):
    where = "standalone" if namespace == STANDALONE_NAMESPACE else "multi-user"
    # Every case's store is S3-compatible (KFP's bundled MinIO/SeaweedFS, or an s3:// root), which the steps
    # reach through tf.io.gfile: tensorflow-io's on tfx-1.16, stackenv/s3_filesystem's on tfx-1.21.
    return pytest.param((model, kind, runs, version, namespace), id=f"{model}-{kind}-{version}-{where}-{runs}run",
                        marks=[pytest.mark.slow] if slow else [])


# In the default suite (CI): the newest backend standalone, and Kubeflow 1.11's multi-user SeaweedFS (profile
# namespace without the store's Service env, per-profile keys the store polices). Behind `slow`: each tested
# backend (pipeline/kubeflow/backend_version.py TESTED_VERSIONS) standalone and multi-user, and two runs of each
# family on each store, the second comparing with the model the first pushed.
CASES = [_case("cnn", "bundled", 1, NEWEST.tag, slow=False),
         _case("seq2seq", "bundled", 1, "2.15.0", MULTI_USER, slow=False),
         *[_case("cnn", "bundled", 1, version, namespace) for version in BACKENDS
           for namespace in (STANDALONE_NAMESPACE, MULTI_USER)
           if (version, namespace) not in ((NEWEST.tag, STANDALONE_NAMESPACE), ("2.15.0", MULTI_USER))],
         *[_case("seq2seq", "bundled", 1, version) for version in BACKENDS],
         _case("seq2seq", "s3", 1, NEWEST.tag),
         *[_case(model, kind, 2, NEWEST.tag) for model in ("cnn", "seq2seq") for kind in ("bundled", "s3")]]


@pytest.fixture(scope="module", params=CASES)
def runs(request, store, tmp_path_factory):
    model, kind, count, version, namespace = request.param
    backend = BACKENDS[version]
    tmp_path = tmp_path_factory.mktemp(f"kfp-contract-{model}-{kind}-{version}-{namespace}")
    with contextlib.ExitStack() as stack:
        address, keys = store, s3_server.BUNDLED_KEYS
        if backend.allowed_prefixes(namespace):  # the profile's own keys, policed by the store
            address, all_keys = stack.enter_context(s3_server.policed_s3_server(
                BUNDLED_BUCKET, {namespace: backend.allowed_prefixes(namespace)}, backend.profile_batch_deletes))
            keys = all_keys[namespace]
        else:
            # A case of its own on an empty store: cases of a store share its bucket, pipeline name and run
            # ids, so a later one would otherwise find an earlier one's pushed versions and artifacts.
            s3_server.reset(store, BUNDLED_BUCKET, OTHER_BUCKET)
        cluster, spec, platform, config = cluster_and_package(model, kind, tmp_path, address, backend, namespace, keys)
        produced, inputs, versions, disks = [], [], [], []
        for index in range(count):
            # deploy sends the package's root with the run; the emulated backend never reads the package's own
            produced.append(cluster.run(spec, run_id=f"run-{index + 1}", runtime_root=spec["defaultPipelineRoot"],
                                        platform=platform, parameters=RUN_PARAMETERS[index]))
            inputs.append(cluster.executor_inputs)
            disks.append(dict(cluster.pod_disk))
            versions.append(_versions(address, config.serving_model_dir))
        print(f"\n{model} on {kind}, KFP {version} in {namespace}: bytes the launcher put on each pod's disk (run 1): "
              f"{json.dumps(disks[0])}")
        yield dict(model=model, kind=kind, spec=spec, platform=platform, config=config, runs=produced,
                   inputs=inputs, versions=versions, disks=disks, address=address, backend=backend,
                   namespace=namespace)


def output_uri_pattern(backend: Backend, run_root: str, task: str, key: str) -> str:
    """The URI the backend's driver provisions for a task's output, as a regex (kfp_backends.py)."""
    salt = "/[0-9a-f-]{36}" if backend.output_uri_salt else ""
    logs = "-0" if key == EXECUTOR_LOGS and backend.logs_retry_suffix else ""
    return f"{re.escape(run_root)}/{re.escape(task)}{salt}/{re.escape(key)}{logs}"


def test_kfp_contract_every_step_runs_and_pushes(runs):
    spec, address, backend = runs["spec"], runs["address"], runs["backend"]
    for index, produced in enumerate(runs["runs"]):
        assert list(produced) == topological_tasks(spec)
        assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1.0
        run_root = f"{spec['defaultPipelineRoot']}/{spec['pipelineInfo']['name']}/run-{index + 1}"
        for task, outputs in produced.items():  # as MLMD records them: under the run, in the root's scheme
            assert (EXECUTOR_LOGS in outputs) == backend.executor_logs
            for key, artifact in outputs.items():
                assert re.fullmatch(output_uri_pattern(backend, run_root, task, key), artifact["uri"]), artifact
        if backend.executor_logs:  # the launcher's log of the step, uploaded beside its outputs
            log = _object(address, produced["Trainer"][EXECUTOR_LOGS]["uri"]).decode()
            assert "Starting executor" in log or "Trainer" in log, log[-2000:]
        model = produced["Trainer"]["model"]["uri"].split("://", 1)[1]
        bucket, prefix = model.split("/", 1)
        assert f"{prefix}/Format-Serving/saved_model.pb" in s3_server.keys(address, bucket, prefix + "/")
        assert len(runs["versions"][index]) == index + 1, runs["versions"]


def test_kfp_contract_the_launcher_put_every_input_on_the_pods_disk(runs):
    """launcher_v2.go downloadArtifacts: the Trainer's pod holds all of its inputs, byte for byte."""
    run = runs["runs"][0]
    trainer_inputs = runs["inputs"][0]["Trainer"]["inputs"]["artifacts"]
    expected = sum(_bytes_under(runs["address"], artifacts["artifacts"][0]["uri"].replace("minio://", "s3://"))
                   for artifacts in trainer_inputs.values())
    assert runs["disks"][0]["Trainer"] == expected > 0
    assert runs["disks"][0]["ResolveInput"] == 0 and set(runs["disks"][0]) == set(run)


def test_kfp_contract_package_gives_the_steps_their_store(runs):
    spec, platform, kind = runs["spec"], runs["platform"], runs["kind"]
    secrets = {entry["secretName"] for config in platform["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"].values() for entry in config["secretAsEnv"]}
    envs = [{e["name"] for e in executor["container"].get("env", [])}
            for executor in spec["deploymentSpec"]["executors"].values()]
    root = ROOTS[kind] if runs["namespace"] == STANDALONE_NAMESPACE else \
        f"minio://{BUNDLED_BUCKET}/private-artifacts/{runs['namespace']}"
    assert spec["defaultPipelineRoot"] == f"{root}/tfx"
    if kind == "bundled":  # the install's secret; the endpoint is found in the pod (no cluster name baked in)
        assert secrets == {"mlpipeline-minio-artifact"} and not any("S3_ENDPOINT" in env for env in envs)
        # the graph's own paths (serving dir) as the steps' TensorFlow reads them
        assert readable_paths(runs["config"]).serving_model_dir.startswith(root.replace("minio://", "s3://")
                                                                           + "/serving/")
    else:
        assert secrets == {OTHER_SECRET} and all("S3_ENDPOINT" in env for env in envs)


def test_kfp_contract_inputs_are_what_the_backend_passes(runs):
    """The emulation is no friendlier than the backend: empty schemas, ids as names, URIs under the run."""
    spec, produced, inputs = runs["spec"], runs["runs"][-1], runs["inputs"][-1]
    run_id = f"run-{len(runs['runs'])}"
    trainer = inputs["Trainer"]
    examples = trainer["inputs"]["artifacts"]["examples"]["artifacts"][0]
    assert examples["type"] == {"instanceSchema": ""}
    # The CNN's Trainer reads its ExampleGen's examples through the transform graph; seq2seq, Transform's.
    reads_raw = FAMILIES[runs["model"]].reads_raw_examples
    producer, key = ("ImportExampleGen", "examples") if reads_raw else ("Transform", "transformed_examples")
    assert examples["name"] == produced[producer][key]["name"]
    assert sorted(json.loads(examples["metadata"]["split_names"])) == ["eval", "train"]
    assert examples["metadata"]["display_name"] == key
    assert reads_raw == (runs["model"] == "cnn")
    model_out = trainer["outputs"]["artifacts"]["model"]["artifacts"][0]
    backend, run_root = runs["backend"], f"{spec['defaultPipelineRoot']}/{spec['pipelineInfo']['name']}/{run_id}"
    assert re.fullmatch(output_uri_pattern(backend, run_root, "Trainer", "model"), model_out["uri"])
    assert model_out.get("name") == ("model" if backend.task_root_outputs else None)
    # 2.15+: the output file in the task root's local path (the launcher's /minio/... or /s3/... folder of the run)
    expected_file = (f"{local_path_for_uri(model_out['uri'].rsplit('/', 1)[0])}/output_metadata.json"
                     if backend.task_root_outputs else "/kfp_outputs/output_metadata.json")
    assert trainer["outputs"]["outputFile"].endswith(expected_file), trainer["outputs"]["outputFile"]
    assert (EXECUTOR_LOGS in trainer["outputs"]["artifacts"]) == backend.executor_logs


def test_kfp_contract_second_run_compared_with_the_served_model(runs):
    if len(runs["runs"]) < 2:
        pytest.skip("a one-run case; the two-run cases (ids ending -2run, `slow`) compare with the served model")
    first = runs["runs"][0]["Evaluator"]["blessing"]["metadata"]
    second = runs["runs"][1]["Evaluator"]["blessing"]["metadata"]
    assert "baseline_model_id" not in first and "baseline_model_uri" not in first  # nothing served yet
    assert second["baseline_model_uri"] == f"{runs['config'].serving_model_dir}/{runs['versions'][0][0]}"
    assert "baseline_model_id" not in second  # no id of an artifact KFP never saw (was: KeyError: 0)
    # The candidate's id was translated back to the KFP artifact name of the Trainer's model.
    assert second["current_model_id"] == runs["runs"][1]["Trainer"]["model"]["name"]


def test_kfp_contract_launcher_refuses_a_local_root(tmp_path):
    """Without the emulator's allowance, a local root fails like the real launcher, before any step runs."""
    spec = {"pipelineInfo": {"name": "p"}, "components": {"c": {"executorLabel": "e", "outputDefinitions": {
        "artifacts": {"out": {"artifactType": {"instanceSchema": "title: tfx.Examples\n"}}}}}},
        "deploymentSpec": {"executors": {"e": {"container": {"command": ["false"]}}}},
        "root": {"dag": {"tasks": {"A": {"componentRef": {"name": "c"}, "taskInfo": {"name": "A"}}}}}}
    with pytest.raises(TaskFailed, match="unsupported storage scheme"):
        Cluster(str(tmp_path)).run(spec, runtime_root=str(tmp_path / "root"))


def _object(address: str, uri: str) -> bytes:
    bucket, key = uri.replace("minio://", "s3://").split("://", 1)[1].split("/", 1)
    return s3_server.client(address).get_object(Bucket=bucket, Key=key)["Body"].read()


def _download(address: str, uri: str, local: str) -> str:
    bucket, prefix = uri.replace("minio://", "s3://").split("://", 1)[1].split("/", 1)
    for key in s3_server.keys(address, bucket, prefix + "/"):
        path = os.path.join(local, os.path.relpath(key, prefix))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(_object(address, f"s3://{bucket}/{key}"))
    return local


def _assets_extra(address: str, run: dict, name: str) -> dict:
    """A JSON file the Trainer wrote into its export's assets.extra (what it trained with)."""
    return json.loads(_object(address, f"{run['Trainer']['model']['uri']}/Format-Serving/assets.extra/{name}"))


def test_kfp_contract_runtime_parameters_set_at_run_creation_reach_the_steps(runs):
    """Run 1 takes the values it was created with, run 2 the compiled defaults: the Trainer records the
    learning rate it trained with and the gate margin it wrote; TFMA stores the gate it applied."""
    from stackenv.tfma import tfma

    from google.protobuf import json_format

    config, address = runs["config"], runs["address"]
    for index, run in enumerate(runs["runs"]):
        given = RUN_PARAMETERS[index]
        assert _assets_extra(address, run, "training.json")["learning_rate"] == \
            given.get("learning_rate", config.learning_rate)
        assert _assets_extra(address, run, "references.json")["margin"] == given.get("gate_margin", config.gate_margin)
        stored = json.loads(_object(address, run["Evaluator"]["evaluation"]["uri"] + "/eval_config.json"))
        eval_config = json_format.ParseDict(stored["evalConfig"], tfma.EvalConfig(), ignore_unknown_fields=True)
        [gate] = [t.threshold for m in eval_config.metrics_specs for c in m.metrics for t in c.per_slice_thresholds]
        assert gate.value_threshold.lower_bound.value == pytest.approx(given.get("min_accuracy", config.min_accuracy))
        if index:  # with a served model; without one TFMA drops change thresholds (utils/config_util.py)
            assert gate.change_threshold.absolute.value == pytest.approx(
                -given.get("max_regression", config.max_regression))


def test_kfp_contract_the_kfp_ui_gets_the_runs_metrics(runs, tmp_path):
    """The report step's system.Metrics hold the Evaluator's overall values (read here with TFMA itself),
    the image family's confusion matrix counts every evaluated example, and the report is a file."""
    from stackenv.tfma import tfma

    from tensorflow_model_analysis.writers import eval_config_writer

    model, address = runs["model"], runs["address"]
    for index, run in enumerate(runs["runs"]):
        evaluation = _download(address, run["Evaluator"]["evaluation"]["uri"], str(tmp_path / f"evaluation-{index}"))
        candidate = next(m.name for m in eval_config_writer.load_eval_run(evaluation)[0].model_specs
                         if not m.is_baseline)
        result = tfma.load_eval_result(evaluation, model_name=candidate or None)
        overall = next(metrics for key, metrics in result.slicing_metrics if not key)[""][""]
        expected = {name: value["doubleValue"] for name, value in overall.items()
                    if "doubleValue" in value and not name.endswith("_diff")}
        metrics = run["EvaluationReport"]["metrics"]["metadata"]
        assert metrics["display_name"] and metrics["blessed"] == 1.0
        assert {name: metrics[name] for name in expected} == pytest.approx(expected)
        assert _object(address, run["EvaluationReport"]["report"]["uri"]).decode().startswith(f"# Evaluation: {model}")
        if model == "cnn":
            matrix = run["EvaluationReport"]["confusion_matrix"]["metadata"]["confusionMatrix"]
            matrix = matrix.get("struct", matrix)  # as MLMD keeps a struct
            assert sorted(spec_["displayName"] for spec_ in matrix["annotationSpecs"]) == [str(d) for d in range(10)]
            assert sum(sum(row["row"]) for row in matrix["rows"]) == expected["example_count"]
        else:
            assert "confusion_matrix" not in run["EvaluationReport"]


def test_kfp_contract_warm_start_from_the_served_model(runs):
    """Run 1 has nothing served and trains from scratch; run 2 (slow cases) starts from run 1's pushed model."""
    config, address, produced = runs["config"], runs["address"], runs["runs"]
    records = [_assets_extra(address, run, "warm_start.json")["warm_start"] for run in produced]
    assert records[0]["source"] is None and "no blessed model" in records[0]["note"]
    if len(produced) > 1:
        base = produced[1]["LatestServedModel"]["model"]["uri"].replace("minio://", "s3://") + "/Format-Serving"
        assert records[1] == {"requested": True, "source": base, "note": "weights restored"}
        served = f"{config.serving_model_dir}/{runs['versions'][0][0]}"
        assert _object(address, f"{base}/saved_model.pb") == _object(address, f"{served}/saved_model.pb")


@pytest.fixture(scope="module")
def image_environment(tmp_path_factory):
    """(folder, python, data) of a fresh environment built by kubeflow/Dockerfile's own COPY, ENV and RUN lines
    (tests/support/image_env.py) for the stack installed here. PIPELINE_IMAGE_ENV names a folder to build in
    and reuse while its inputs are unchanged."""
    from support import image_env

    directory = os.environ.get("PIPELINE_IMAGE_ENV") or str(tmp_path_factory.mktemp("image-env"))
    return (directory, *image_env.build(directory))


@pytest.mark.slow  # builds the image's environment (hundreds of packages; minutes) unless PIPELINE_IMAGE_ENV holds it
def test_kfp_contract_the_dockerfile_environment_runs_the_installed_project_and_compiles(image_environment, tmp_path):
    """On each stack, the image's environment imports the installed project, not this checkout (a file
    `pip install .` leaves out fails here as it would on the cluster), and `compile` there writes a valid spec
    whose steps run that image, identical to this checkout's; with a gs:// root, which TensorFlow writes itself
    on both stacks."""
    directory, python, _ = image_environment
    env = {"PATH": os.environ["PATH"]}
    located = subprocess.run([python, "-c", "import pipeline, sys; print(pipeline.__file__)"], cwd=str(tmp_path),
                             capture_output=True, text=True, env=env, check=True)
    assert located.stdout.startswith(directory) and "site-packages" in located.stdout, located.stdout
    args = ["compile", "--image", IMAGE, "--pipeline-root", "gs://team-bucket/tfx"]
    compiled = subprocess.run([python, "-m", "pipeline", *args, "--output", str(tmp_path / "image.yaml")],
                              cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=600)
    assert compiled.returncode == 0, compiled.stdout[-2000:] + compiled.stderr[-3000:]
    here = run_cli(*args, "--output", tmp_path / "checkout.yaml")
    assert here.returncode == 0, here.stderr[-3000:]
    # The same spec as this checkout compiles (nothing differs by where the code was installed from).
    assert (tmp_path / "image.yaml").read_text() == (tmp_path / "checkout.yaml").read_text()
    (spec,) = yaml.safe_load_all((tmp_path / "image.yaml").read_text())
    images = {executor["container"]["image"] for executor in spec["deploymentSpec"]["executors"].values()}
    assert images == {IMAGE} and spec["defaultPipelineRoot"].startswith("gs://team-bucket/tfx")


@pytest.mark.slow  # builds the image's environment (hundreds of packages; minutes) unless PIPELINE_IMAGE_ENV holds it
def test_kfp_contract_every_step_runs_in_the_environment_the_dockerfile_builds(store, image_environment,
                                                                               tmp_path_factory):
    """Every step of a cnn run from the image's environment, importing the installed project and not this
    checkout: a package missing from setup.py/constraints/<stack>.txt fails here as it would on the cluster."""
    directory, python, data = image_environment
    tmp_path = tmp_path_factory.mktemp("kfp-contract-image")
    root = f"minio://{BUNDLED_BUCKET}/image-env"  # a prefix of its own: the store is shared with other cases
    spec, platform, config, _ = compile_for_contract("cnn", tmp_path, root=root)
    cluster = Cluster(str(tmp_path), store_address=store,
                      secrets={"mlpipeline-minio-artifact": s3_server.BUNDLED_KEYS}, image_python=python,
                      image_paths={IMAGE_DATA_ROOT: os.path.join(data, "data")})
    produced = cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"], platform=platform)
    assert list(produced) == topological_tasks(spec)
    assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1.0
    assert len(_versions(store, config.serving_model_dir)) == 1
