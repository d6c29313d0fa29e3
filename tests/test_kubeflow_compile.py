"""Kubeflow: the compiled KFP v2 spec is the local graph, with the root and entrypoint a cluster needs.

No cluster here: the spec is parsed with kfp's own PipelineSpec proto and loader; its steps
run in tests/test_kubeflow_contract.py, passed what a KFP backend passes (tests/support/kfp_contract.py).
"""
import json
import re

import pytest
import yaml
from conftest import run_cli
from google.protobuf import json_format
from kfp import components as kfp_components
from kfp.pipeline_spec import pipeline_spec_pb2

from pipeline.config import PipelineConfig
from pipeline.families import FAMILIES
from pipeline.graph import create_pipeline
from pipeline.kubeflow.backend_version import add_retries
from pipeline.kubeflow.compile import dataset_for_cluster
from pipeline.kubeflow.fresh_data import RESOLVE_TASK
from pipeline.kubeflow.platform import StepSettings, pinned_image
from pipeline.kubeflow.report_step import REPORT_TASK
from pipeline.kubeflow.storage import KubeflowConfigError

IMAGE = "registry.example.com/tfx-project:test"
ENTRYPOINT = ["python", "-m", "pipeline.kubeflow.entrypoint"]  # wraps TFX's kubeflow_v2_run_executor
ROOT = "gs://my-bucket/team/tfx-root"


def _compile(tmp_path, model, *extra):
    package = tmp_path / f"{model}.yaml"
    result = run_cli("compile", "--model", model, "--image", IMAGE, "--pipeline-root", ROOT,
                     "--output", package, *extra)
    assert result.returncode == 0, result.stderr[-4000:]
    with open(package) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def compiled(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"kfp-{request.param}")
    return request.param, tmp_path, _compile(tmp_path, request.param, "--train-steps", "20",
                                             "--min-accuracy", "0.0", "--gate-margin", "-1")


def test_spec_parses_with_kfp(compiled):
    model, tmp_path, spec = compiled
    proto = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert proto.schema_version == "2.1.0"  # parameterValues, which OSS KFP v2 fills
    assert proto.pipeline_info.name == f"{model}-pipeline"
    component = kfp_components.load_component_from_file(str(tmp_path / f"{model}.yaml"))
    assert component.name == f"{model}-pipeline"


def test_dag_equals_the_local_graph(compiled):
    model, tmp_path, spec = compiled
    config = PipelineConfig(model=model, output_dir=str(tmp_path / "root"))
    local = create_pipeline(config, dataset_for_cluster(config, FAMILIES[model].prepare_data))
    local_edges = {c.id: {u.id for u in c.upstream_nodes} for c in local.components}
    tasks = spec["root"]["dag"]["tasks"]
    # Plus the input-resolution step before the ExampleGen (pipeline/kubeflow/fresh_data.py), and the
    # KFP UI's report after the Evaluator (pipeline/kubeflow/report_step.py).
    assert set(tasks[RESOLVE_TASK].get("dependentTasks", [])) == set()
    # The image family's class names come from the Transform graph (for the confusion matrix).
    assert set(tasks[REPORT_TASK]["dependentTasks"]) == {"Evaluator", *(["Transform"] if model == "cnn" else [])}
    assert {t: set(body.get("dependentTasks", [])) - {RESOLVE_TASK} for t, body in tasks.items()
            if t not in (RESOLVE_TASK, REPORT_TASK)} == local_edges


def test_every_executor_runs_the_image_entrypoint(compiled):
    _, _, spec = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert len(executors) == len(spec["root"]["dag"]["tasks"])
    for name, executor in executors.items():
        container = executor["container"]
        if name == f"{RESOLVE_TASK}_executor":  # not a TFX component: lists the ExampleGen's input
            assert container["image"] == IMAGE and container["command"][-1] == "pipeline.kubeflow.resolve_input"
            continue
        if name == f"{REPORT_TASK}_executor":  # not a TFX component: the KFP UI's artifacts
            assert container["image"] == IMAGE and container["command"][-1] == "pipeline.kubeflow.report_step"
            assert container["args"] == ["--executor-input", "{{$}}"]
            continue
        assert container["image"] == IMAGE, name
        assert container["command"] == ENTRYPOINT, name
        args = container["args"]
        assert args[args.index("--executor_class_path") + 1], name
        assert args[args.index("--json_serialized_invocation_args") + 1] == "{{$}}", name
        assert "--direct_running_mode=in_memory" in args, name
    assert "components.evaluator.Executor" in json.dumps(executors)  # served-model baseline, no Resolver
    assert "resolver" not in json.dumps(spec).lower()


def test_parameters_are_compiled_in(compiled):
    model, tmp_path, spec = compiled
    tasks = spec["root"]["dag"]["tasks"]
    params = {t: {k: v["runtimeValue"]["constant"] for k, v in body.get("inputs", {}).get("parameters", {}).items()
                  if "runtimeValue" in v} for t, body in tasks.items()}
    # The ExampleGen reads the bundled data inside the step (nothing read or baked in at compile time):
    # the data path is a runtime parameter whose default is the compiled one.
    assert tasks["ImportExampleGen"]["inputs"]["parameters"]["input_base"] == {"componentInputParameter": "data"}
    assert spec["root"]["inputDefinitions"]["parameters"]["data"]["defaultValue"].startswith("bundled:")
    trainer_config = json.loads(params["Trainer"]["custom_config"])
    assert trainer_config["code_version"] == FAMILIES[model].code_version()
    assert json.loads(params["Trainer"]["train_args"])["num_steps"] == 20
    serving = f"{ROOT}/serving/{model}"
    assert params["Evaluator"]["baseline_serving_dir"] == serving
    assert int(params["Evaluator"]["eval_batch"]) == 256  # --eval-batch's default reaches the step
    assert json.loads(params["Pusher"]["push_destination"])["filesystem"]["base_directory"] == serving
    assert params["Transform"]["preprocessing_fn"] == FAMILIES[model].preprocessing_fn
    assert params["Trainer"]["run_fn"] == FAMILIES[model].run_fn


def test_pipeline_root_is_recorded_in_the_package(compiled):
    """TFX's YAML drops the root; KFP would fall back to minio://, which no step can write."""
    _, _, spec = compiled
    assert spec["defaultPipelineRoot"] == f"{ROOT}/tfx"


@pytest.mark.parametrize("root, expected", [
    ("relative/root", "local path"),
    ("file:///mnt/root", "local path"),
    ("hdfs://namenode/root", "hdfs://"),
    ("gs://", "names no bucket"),
])
def test_compile_refuses_roots_a_pod_cannot_write(tmp_path, root, expected):
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", root, "--output", tmp_path / "p.yaml")
    assert result.returncode == 2, result.stderr[-2000:]
    assert root in result.stderr and expected in result.stderr and "--pipeline-root gs://" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "p.yaml").exists()


def test_compile_rejects_unprepared_data(tmp_path):
    # Only the prepare path reads a manifest at compile time (the default reads nothing).
    # (a local path is refused before it is read: tests/test_hardening4.py; a URI that holds no manifest here)
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", ROOT, "--data", f"ram://{tmp_path.name}",
                     "--ingest", "prepare")
    assert result.returncode == 2
    assert "not a prepared dataset" in result.stderr and "python -m pipeline prepare" in result.stderr


POD_FLAGS = ("--cpu-request", "500m", "--memory-limit", "4Gi", "--trainer-cpu", "2", "--trainer-memory", "8G",
             "--trainer-gpus", "1", "--secret-env", "db-creds:password=DB_PASSWORD",
             "--secret-volume", "gcp-key=/secrets/gcp", "--node-selector", "pool=highmem",
             "--toleration", "nvidia.com/gpu=present:NoSchedule", "--toleration", "spot:NoExecute",
             "--image-pull-secret", "regcred", "--s3-endpoint", "http://minio-service.kubeflow:9000",
             "--s3-secret", "mlpipeline-minio-artifact")


def test_pod_settings_are_in_the_compiled_yaml(tmp_path):
    """Resources/GPU/env in the PipelineSpec containers, the rest in the Kubernetes platform spec,
    both parsed with the protos a KFP 2.x server parses them with."""
    package = tmp_path / "cnn.yaml"
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", "s3://mlpipeline/tfx", "--output", package,
                     *POD_FLAGS)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(package) as handle:
        spec, platform = yaml.safe_load_all(handle)
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    executors = spec["deploymentSpec"]["executors"]
    trainer = executors[spec["components"]["Trainer"]["executorLabel"]]["container"]
    assert trainer["resources"] == {"cpuRequest": 2.0, "cpuLimit": 2.0, "memoryRequest": 8.0, "memoryLimit": 8.0,
                                    "accelerator": {"type": "nvidia.com/gpu", "count": 1}}
    statistics = executors[spec["components"]["StatisticsGen"]["executorLabel"]]["container"]
    assert statistics["resources"] == {"cpuRequest": 0.5, "memoryLimit": 4 * 2**30 / 1e9}
    env = {e["name"]: e["value"] for e in statistics["env"]}
    assert env["AWS_ENDPOINT_URL"] == env["S3_ENDPOINT"] == "http://minio-service.kubeflow:9000"
    assert env["S3_USE_HTTPS"] == "0"
    pods = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(pods) == set(executors)
    config = pods[spec["components"]["Trainer"]["executorLabel"]]
    assert config["secretAsEnv"] == [
        {"secretName": "mlpipeline-minio-artifact", "keyToEnv": [
            {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
            {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}]},
        {"secretName": "db-creds", "keyToEnv": [{"secretKey": "password", "envVar": "DB_PASSWORD"}]}]
    assert config["secretAsVolume"] == [{"secretName": "gcp-key", "mountPath": "/secrets/gcp"}]
    assert config["nodeSelector"] == {"labels": {"pool": "highmem"}}
    assert config["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"}]
    assert config["imagePullSecret"] == [{"secretName": "regcred"}]


@pytest.mark.parametrize("flags, expected", [
    (("--secret-env", ":password=DB_PASSWORD"), "names no secret"),
    (("--secret-env", "db-creds"), "ENV_VAR=SECRET:KEY"),
    (("--secret-volume", "=/secrets"), "names no secret"),
    (("--toleration", "gpu:Sometimes"), "NoSchedule"),
    (("--cpu-limit", "two"), "Kubernetes quantity"),
    (("--s3-secret", "mlpipeline-minio-artifact"), "--s3-endpoint"),
    (("--pipeline-root", "s3://team-bucket/tfx"), "no --s3-endpoint was given"),
    (("--pipeline-root", "s3://team-bucket/tfx", "--s3-endpoint", "minio.storage:9000"), "is not a URL"),
])
def test_bad_pod_settings_are_a_paragraph(tmp_path, flags, expected):
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", ROOT, "--output", tmp_path / "p.yaml", *flags)
    assert result.returncode == 2 and expected in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "p.yaml").exists()


# KFP's frontend draws these exact type titles (frontend/src/components/viewers/MetricsVisualizations.tsx).
UI_TITLES = {"metrics": "system.Metrics", "confusion_matrix": "system.ClassificationMetrics",
             "report": "system.Markdown"}


def test_the_kfp_ui_gets_metrics_and_a_report(compiled):
    """Both families: Metrics and Markdown after the Evaluator; the image family a confusion matrix too."""
    model, _, spec = compiled
    outputs = spec["components"][REPORT_TASK]["outputDefinitions"]["artifacts"]
    titles = {key: declared["artifactType"]["schemaTitle"] for key, declared in outputs.items()}
    expected = dict(UI_TITLES) if model == "cnn" else {k: v for k, v in UI_TITLES.items() if k != "confusion_matrix"}
    assert titles == expected
    inputs = spec["root"]["dag"]["tasks"][REPORT_TASK]["inputs"]["artifacts"]
    assert inputs["evaluation"]["taskOutputArtifact"] == {"producerTask": "Evaluator",
                                                          "outputArtifactKey": "evaluation"}


# PipelineConfig field -> the parameterType a KFP server needs to accept a value at run creation.
RUNTIME_TYPES = {"data": "STRING", "epochs": "NUMBER_INTEGER", "learning_rate": "NUMBER_DOUBLE",
                 "min_accuracy": "NUMBER_DOUBLE", "max_regression": "NUMBER_DOUBLE", "gate_margin": "NUMBER_DOUBLE"}


def test_runtime_parameters_are_typed_with_the_compiled_defaults(compiled):
    model, _, spec = compiled
    declared = spec["root"]["inputDefinitions"]["parameters"]
    assert {name: p["parameterType"] for name, p in declared.items()} == RUNTIME_TYPES
    family = FAMILIES[model]
    assert declared["epochs"]["defaultValue"] == family.defaults.epochs
    assert declared["learning_rate"]["defaultValue"] == family.defaults.learning_rate
    assert declared["min_accuracy"]["defaultValue"] == 0.0 and declared["gate_margin"]["defaultValue"] == -1
    assert declared["data"]["defaultValue"].startswith("bundled:")
    tasks = spec["root"]["dag"]["tasks"]
    uses = {t: {k: v["componentInputParameter"] for k, v in body.get("inputs", {}).get("parameters", {}).items()
                if "componentInputParameter" in v} for t, body in tasks.items()}
    assert uses["ImportExampleGen"] == uses[RESOLVE_TASK] == {"input_base": "data"}
    assert uses["Trainer"] == {f"runtime_{n}": n for n in ("epochs", "learning_rate", "gate_margin")}
    assert uses["Evaluator"] == {f"runtime_{n}": n for n in ("min_accuracy", "max_regression")}
    trainer_inputs = spec["components"]["Trainer"]["inputDefinitions"]["parameters"]
    assert trainer_inputs["runtime_epochs"] == {"parameterType": "NUMBER_INTEGER"}
    assert "retryPolicy" not in json.dumps(spec)  # no retries unless asked for


DIGEST = "sha256:" + "ab" * 32


def test_retries_per_step_env_digest_and_warm_start_are_compiled(tmp_path):
    """One compile for the options that change the spec: retries on every root task, env and secrets
    for every step or one, the image by digest, and the warm-start step instead of TFX's Resolver."""
    package = tmp_path / "cnn.yaml"
    result = run_cli("compile", "--image", f"registry.example.com/team/tfx:v1@{DIGEST}", "--pipeline-root", ROOT,
                     "--output", package, "--retries", "3", "--kfp-version", "2.4.1", "--warm-start",
                     "--env", "LOG_LEVEL=debug", "--env", "Trainer/TF_CPP_MIN_LOG_LEVEL=1",
                     "--secret-env", "Trainer/DB_PASSWORD=db-creds:password",
                     "--secret-env", "db-creds:user=DB_USER", "--trainer-gpus", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    with open(package) as handle:
        spec, platform = yaml.safe_load_all(handle)
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    tasks, executors = spec["root"]["dag"]["tasks"], spec["deploymentSpec"]["executors"]
    assert {t: body["retryPolicy"]["maxRetryCount"] for t, body in tasks.items()} == {t: 3 for t in tasks}
    containers = {t: executors[spec["components"][body["componentRef"]["name"]]["executorLabel"]]["container"]
                  for t, body in tasks.items()}
    assert {c["image"] for c in containers.values()} == {f"registry.example.com/team/tfx@{DIGEST}"}
    env = {t: {e["name"]: e["value"] for e in c.get("env", [])} for t, c in containers.items()}
    assert env["Trainer"] == {"LOG_LEVEL": "debug", "TF_CPP_MIN_LOG_LEVEL": "1"}
    assert env["Evaluator"] == {"LOG_LEVEL": "debug"}
    assert [t for t, c in containers.items() if "accelerator" in c.get("resources", {})] == ["Trainer"]
    pods = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    secrets = {label: [(k["envVar"], s["secretName"], k["secretKey"]) for s in config["secretAsEnv"]
                       for k in s["keyToEnv"]] for label, config in pods.items()}
    trainer_label = spec["components"]["Trainer"]["executorLabel"]
    assert sorted(secrets[trainer_label]) == [("DB_PASSWORD", "db-creds", "password"), ("DB_USER", "db-creds", "user")]
    assert secrets[spec["components"]["Pusher"]["executorLabel"]] == [("DB_USER", "db-creds", "user")]
    # Warm start: no resolver executor (the backend has none); a container step feeds base_model.
    assert "resolver" not in json.dumps(executors)
    assert tasks["Trainer"]["inputs"]["artifacts"]["base_model"]["taskOutputArtifact"]["producerTask"] == \
        "LatestServedModel"
    assert tasks["LatestServedModel"]["cachingOptions"] == {"enableCache": False}
    assert containers["LatestServedModel"]["command"][-1] == "pipeline.kubeflow.warm_start_step"


@pytest.mark.parametrize("flags, expected", [
    (("--retries", "2", "--kfp-version", "2.3.0"), "2.4.1 or newer"),  # refused before compiling
    (("--env", "Nope/A=1"), "has no step 'Nope'"),                      # checked on the compiled steps
])
def test_bad_backend_options_are_a_paragraph(tmp_path, flags, expected):
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", ROOT, "--output", tmp_path / "p.yaml", *flags)
    assert result.returncode == 2 and expected in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("check, expected", [
    (lambda: add_retries({}, 2, "1.8.22"), "only a 2.x backend"),
    (lambda: add_retries({}, 2, "latest"), "not a KFP backend version"),
    (lambda: add_retries({}, -1, "2.5.0"), "give 0"),
    (lambda: StepSettings(env=["NO_VALUE"]), "[STEP/]NAME=VALUE"),
    (lambda: StepSettings(env=["Trainer/1BAD=x"]), "[STEP/]NAME=VALUE"),
    (lambda: StepSettings(secret_env=["A=creds"]), "ENV_VAR=SECRET:KEY"),
    (lambda: pinned_image("registry.example.com/tfx@sha256:123"), "64 hex digits"),
])
def test_bad_backend_option_values_are_a_paragraph(check, expected):
    with pytest.raises(KubeflowConfigError, match=re.escape(expected)):
        check()


def test_image_digest_names_the_image():
    assert pinned_image(f"r.example.com/t/x:v1@{DIGEST}") == f"r.example.com/t/x@{DIGEST}"
    assert pinned_image("r.example.com:5000/x:v1") == "r.example.com:5000/x:v1"  # a tag stays, with a warning


def test_score_compiles_the_bulk_inferrer_on_the_blessed_model(tmp_path):
    """``--score``: the scoring ExampleGen (never cached: it lists its folder), TFX's BulkInferrer fed by the
    Trainer's model and the Evaluator's blessing, and the writer of its predictions (components/scoring.py)."""
    from pipeline import graph
    from pipeline.kubeflow.fresh_data import SCORING_TASK

    assert SCORING_TASK == graph.SCORING_EXAMPLE_GEN
    score_dir = "gs://my-bucket/team/to-score"
    spec = _compile(tmp_path, "cnn", "--train-steps", "20", "--score", score_dir)
    tasks = spec["root"]["dag"]["tasks"]
    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "root"), score_dir=score_dir)
    local = create_pipeline(config, dataset_for_cluster(config, FAMILIES["cnn"].prepare_data))
    assert {c.id: {u.id for u in c.upstream_nodes} for c in local.components} == {
        t: set(body.get("dependentTasks", [])) - {RESOLVE_TASK} for t, body in tasks.items()
        if t not in (RESOLVE_TASK, REPORT_TASK)}
    assert set(tasks[graph.BULK_INFERRER]["dependentTasks"]) == {graph.SCORING_EXAMPLE_GEN, "Trainer", "Evaluator"}
    assert set(tasks[graph.SCORE_WRITER]["dependentTasks"]) == {graph.BULK_INFERRER, graph.SCORING_EXAMPLE_GEN,
                                                                 "Evaluator"}
    blessing = tasks[graph.BULK_INFERRER]["inputs"]["artifacts"]["model_blessing"]["taskOutputArtifact"]
    assert blessing == {"producerTask": "Evaluator", "outputArtifactKey": "blessing"}
    assert tasks[graph.SCORING_EXAMPLE_GEN]["cachingOptions"] == {"enableCache": False}
    parameters = tasks[graph.SCORING_EXAMPLE_GEN]["inputs"]["parameters"]
    assert parameters["score_dir"]["runtimeValue"]["constant"] == score_dir
    model_spec = tasks[graph.BULK_INFERRER]["inputs"]["parameters"]["model_spec"]["runtimeValue"]["constant"]
    assert json.loads(model_spec) == {"model_signature_name": ["score_examples"]}
    executors = json.dumps(spec["deploymentSpec"]["executors"])
    assert "tfx.components.bulk_inferrer.executor.Executor" in executors
    assert "components.scoring.ScoreWriterExecutor" in executors


def test_a_backend_outside_the_tested_versions_is_a_warning_and_the_default_is_the_newest(tmp_path):
    from pipeline.kubeflow.backend_version import DEFAULT_KFP_VERSION, TESTED_VERSIONS

    assert DEFAULT_KFP_VERSION == TESTED_VERSIONS[-1] == "2.17.0"  # tests/support/kfp_backends.py NEWEST
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", ROOT, "--output", tmp_path / "p.yaml",
                     "--kfp-version", "2.2.0")
    assert result.returncode == 0 and (tmp_path / "p.yaml").exists(), result.stderr[-2000:]
    assert "--kfp-version is KFP backend 2.2.0, older than the versions this project is tested against " \
           "(2.3.0, 2.5.0, 2.15.0, 2.17.0" in result.stderr.replace("\n", " ")
