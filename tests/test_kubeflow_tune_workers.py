"""``compile --tune-workers N``: the Tuner step's trials run in a TFJob (pipeline/kubeflow/training/tuner_launcher.py).

Fast: the KerasTuner roles each pod derives from the TF_CONFIG the operator would set for the
manifest the launcher builds (tests/test_kubeflow_tfjob.py's operator_tf_config, derived from
the operator's source), the compiled YAML and the option's checks. Slow: the compiled pipeline
through the KFP contract emulator with the Tuner's TFJob through the TFJob API emulator
(tests/support/k8s_tfjob_api.py), both trial workers running trials, and a worker that dies.
"""
import json
import os
from types import SimpleNamespace

from stackenv.errors import ConfigError

import pytest
import yaml
from test_kubeflow_tfjob import operator_tf_config

from pipeline.config import PipelineConfig
from pipeline.kubeflow.training.trainer_launcher import TEMPLATE_ENV, TFJOB_KEY
from pipeline.kubeflow.training.tuner_launcher import LAUNCHER_TUNER_FN, launcher_config, tfjob_for
from pipeline.kubeflow.training.tuner_worker import TunerWorkerError, keras_tuner_env

IMAGE = "registry.example.com/tfx-project:test"


def _fn_args(root: str, workers: int = 2):
    from tfx.components.trainer.fn_args_utils import FnArgs

    _, custom = launcher_config("models.cnn.tuning.tuner_fn", {"model_family": "cnn"}, workers, 600)
    examples = f"{root}/ImportExampleGen/examples/7"
    return FnArgs(train_files=[f"{examples}/Split-train/*"], eval_files=[f"{examples}/Split-eval/*"],
                  transform_graph_path=f"{root}/Transform/transform_graph/7", train_steps=5, eval_steps=1,
                  working_dir=f"{root}/Tuner/tuner_results/8/search", custom_config=custom)


def test_each_pod_derives_its_keras_tuner_role_from_the_operators_tf_config():
    from pipeline.kubeflow.training.kube_api import TFJOB

    api = SimpleNamespace(namespace="team", service_account="pipeline-runner", kind=TFJOB)
    manifest = tfjob_for(_fn_args("gs://bucket/root", workers=2), api, {"image": IMAGE, "container": {}, "pod": {}})
    name = manifest["metadata"]["name"]
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert (replicas["Chief"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)  # the oracle + 2 trial runners
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "pipeline.kubeflow.training.tuner_worker"]
    job = json.loads(container["args"][1])
    assert job["tuner_fn"] == "models.cnn.tuning.tuner_fn" and TFJOB_KEY not in job["custom_config"]
    assert job["workers"] == 2  # the chief stops serving once both trial runners wrote their records
    assert job["search_dir"] == "gs://bucket/root/Tuner/tuner_results/8/search"

    chief = keras_tuner_env(operator_tf_config(manifest, "Chief", 0))
    assert chief == {"KERASTUNER_TUNER_ID": "chief", "KERASTUNER_ORACLE_IP": "0.0.0.0",
                     "KERASTUNER_ORACLE_PORT": "2222"}
    for index in (0, 1):
        env = keras_tuner_env(operator_tf_config(manifest, "Worker", index, cluster_domain="cluster.local"))
        assert env == {"KERASTUNER_TUNER_ID": f"tuner{index}",
                       "KERASTUNER_ORACLE_IP": f"{name}-chief-0.team.svc.cluster.local",
                       "KERASTUNER_ORACLE_PORT": "2222"}


def test_each_trainjob_pod_derives_the_same_roles_from_its_index():
    """Kubeflow Trainer v2: no operator sets TF_CONFIG; each pod of the Indexed node job derives it."""
    from pipeline.kubeflow.training.kube_api import TRAINJOB
    from pipeline.kubeflow.training.trainjob import CLUSTER_ENV, ensure_tf_config

    api = SimpleNamespace(namespace="team", service_account="pipeline-runner", kind=TRAINJOB)
    manifest = tfjob_for(_fn_args("gs://bucket/root", workers=2), api, {"image": IMAGE, "container": {}, "pod": {}})
    name, trainer = manifest["metadata"]["name"], manifest["spec"]["trainer"]
    assert manifest["kind"] == "TrainJob" and trainer["numNodes"] == 3  # the oracle + 2 trial runners
    assert trainer["command"] == ["python", "-m", "pipeline.kubeflow.training.tuner_worker"]
    cluster = next(e["value"] for e in trainer["env"] if e["name"] == CLUSTER_ENV)
    roles = []
    for index in range(3):
        environ = {CLUSTER_ENV: cluster, "JOB_COMPLETION_INDEX": str(index)}
        ensure_tf_config(environ)
        roles.append(keras_tuner_env(environ["TF_CONFIG"]))
    assert roles[0] == {"KERASTUNER_TUNER_ID": "chief", "KERASTUNER_ORACLE_IP": "0.0.0.0",
                        "KERASTUNER_ORACLE_PORT": "2222"}
    assert roles[1:] == [{"KERASTUNER_TUNER_ID": f"tuner{i}", "KERASTUNER_ORACLE_IP": f"{name}-node-0-0.{name}",
                          "KERASTUNER_ORACLE_PORT": "2222"} for i in (0, 1)]


@pytest.mark.parametrize("tf_config", ["", "{not json", json.dumps({"cluster": {"worker": ["w:2222"]},
                                                                     "task": {"type": "worker", "index": 0}})])
def test_a_pod_without_the_operators_tf_config_is_one_paragraph(tf_config):
    with pytest.raises(TunerWorkerError) as caught:
        keras_tuner_env(tf_config)
    assert "TF_CONFIG" in caught.value.paragraph and "compile --tune-workers" in caught.value.paragraph
    assert "\n" not in caught.value.paragraph


def test_compiled_tuner_step_launches_a_tfjob_of_an_oracle_and_n_trial_workers(tmp_path):
    from pipeline.kubeflow.compile import compile_pipeline
    from pipeline.kubeflow.platform import StepSettings

    config = PipelineConfig(model="cnn", output_dir="gs://bucket/root", tune_trials=6, tune_workers=3)
    settings = StepSettings(trainer_cpu="4", trainer_memory="8Gi", cpu_request="500m")
    spec = next(yaml.safe_load_all(open(compile_pipeline(config, None, IMAGE, str(tmp_path / "p.yaml"), settings))))
    tuner = spec["root"]["dag"]["tasks"]["Tuner"]["inputs"]["parameters"]
    assert tuner["tuner_fn"]["runtimeValue"]["constant"] == LAUNCHER_TUNER_FN
    custom = json.loads(tuner["custom_config"]["runtimeValue"]["constant"])
    assert custom[TFJOB_KEY] == {"workers": 3, "tuner_fn": "models.cnn.tuning.tuner_fn", "timeout_seconds": 86400}
    assert custom["shared_working_dir"] is True
    executors = spec["deploymentSpec"]["executors"]
    container = executors["Tuner_executor"]["container"]
    assert container["resources"] == {"cpuRequest": 0.5}  # the launcher only waits
    template = json.loads(next(e["value"] for e in container["env"] if e["name"] == TEMPLATE_ENV))
    assert template["image"] == IMAGE
    assert template["container"]["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}
    assert TEMPLATE_ENV not in json.dumps(executors["Trainer_executor"])  # the Trainer trains in its own pod


def test_tune_workers_needs_a_search_and_the_cli_offers_it():
    from pipeline.arguments import build_parser, config_from_args

    with pytest.raises(ConfigError) as caught:
        PipelineConfig(model="cnn", output_dir="gs://bucket/root", tune_workers=2)
    assert caught.value.flag == "--tune-workers" and "--tune-trials" in caught.value.paragraph
    with pytest.raises(ConfigError) as caught:
        PipelineConfig(model="cnn", output_dir="gs://bucket/root", tune_trials=4, tune_workers=0)
    assert caught.value.flag == "--tune-workers"
    args = build_parser().parse_args(["compile", "--model", "cnn", "--pipeline-root", "gs://bucket/root",
                                      "--image", IMAGE, "--tune-trials", "4", "--tune-workers", "2"])
    config = config_from_args(args)
    assert (config.tune_workers, config.tune_job_timeout) == (2, 24 * 3600)


def _compiled_with_tfjob(tmp_path, trials: int):
    from test_kubeflow_contract import SETTINGS

    from pipeline.kubeflow.compile import compile_pipeline

    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "root"), tune_trials=trials, tune_steps=5,
                            tune_workers=2, **SETTINGS["cnn"])
    spec = next(yaml.safe_load_all(open(compile_pipeline(config, None, IMAGE, str(tmp_path / "p.yaml")))))
    container = spec["deploymentSpec"]["executors"]["Tuner_executor"]["container"]
    # A KFP driver puts the container's env into the pod (driver.go); the contract emulator passes only its own.
    (tmp_path / "pods").mkdir()
    return spec, {e["name"]: e["value"] for e in container.get("env", [])}


@pytest.mark.slow  # ExampleGen to Trainer as processes, the Tuner's oracle and two trial workers as pods
@pytest.mark.timeout(3600)
def test_compiled_tuner_step_runs_trials_on_two_workers_and_the_trainer_uses_the_best(tmp_path):
    from support.k8s_tfjob_api import TFJobApiServer
    from support.kfp_contract import Cluster

    trials = 4
    spec, step_env = _compiled_with_tfjob(tmp_path, trials)
    with TFJobApiServer(tmp_path / "pods") as server:
        # Each runner's first trial waits until both began one: "both ran trials" however the start-ups interleave.
        server.trial_barrier = ("worker-0", "worker-1")
        cluster = Cluster(str(tmp_path), allow_local_root=True,
                          env={**step_env, "KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})
        produced = cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"], until="Trainer")
        (manifest,) = server.created
        record = server.jobs[("team", manifest["metadata"]["name"])]
        codes = {key: pod["process"].returncode for key, pod in record["pods"].items()}
        conditions = {c["type"]: c["status"] for c in record["object"]["status"]["conditions"]}
        logs = {key: server.log(f"{manifest['metadata']['name']}-{key}") for key in record["pods"]}
    assert conditions["Succeeded"] == "True", logs
    assert codes["chief-0"] == 0, logs["chief-0"][-3000:]
    results = produced["Tuner"]["tuner_results"]["uri"]
    per_tuner = {}
    for worker in ("tuner0", "tuner1"):
        with open(os.path.join(results, "search", "records", f"{worker}.json")) as handle:
            per_tuner[worker] = sorted(json.load(handle)["trial_seconds"])
    assert all(per_tuner.values()), per_tuner                       # both replicas ran trials
    ran = [trial for ids in per_tuner.values() for trial in ids]
    assert len(ran) == len(set(ran)) == trials                      # each trial once, in one of them
    # The oracle's own records (the chief's project directory): every trial completed there.
    chief_trials = [name for name in os.listdir(os.path.join(results, "search", "chief", "search"))
                    if name.startswith("trial_")]
    assert len(chief_trials) == trials
    search = json.loads(open(os.path.join(results, "search.json")).read())
    assert search["trials_completed"] == search["trials_run"] == trials and search["default_score"] is not None
    best = json.loads(open(os.path.join(produced["Tuner"]["best_hyperparameters"]["uri"],
                                        "best_hyperparameters.txt")).read())["values"]
    model_dir = produced["Trainer"]["model"]["uri"]
    training = json.loads(open(os.path.join(model_dir, "Format-Serving", "assets.extra", "training.json")).read())
    assert training["tuned"] == best


@pytest.mark.slow  # ExampleGen to Transform as processes, then a Tuner TFJob whose worker dies
@pytest.mark.timeout(3600)
def test_compiled_tuner_step_fails_with_the_tfjob_paragraph_when_a_worker_dies(tmp_path):
    from support.k8s_tfjob_api import run_with_a_dying_replica

    spec, step_env = _compiled_with_tfjob(tmp_path, 20)
    # Killed in its first trial (held there until killed, so the search cannot end first), which both runners
    # begin before either goes on (the barrier): worker-0 alone cannot take all the trials on a fast machine.
    failure, name, cluster, killed = run_with_a_dying_replica(tmp_path, spec, step_env, "worker-1",
                                                              at=("trials begun", 1),
                                                              trial_barrier=("worker-0", "worker-1"))
    assert killed["trials begun"] == 1, killed
    assert failure.task == "Tuner"
    message = str(failure)
    assert f"The Tuner's TFJob team/{name} failed: TFJob team/{name} has failed because 1 Worker replica(s) " \
           "failed" in message
    assert "no hyperparameters reach the Trainer" in message
    assert f"kubectl logs -n team -l training.kubeflow.org/job-name={name}" in message
    assert "Trainer" not in cluster.executor_inputs  # nothing trained


@pytest.mark.timeout(120)
def test_the_chief_stops_serving_once_every_runner_recorded_its_end(tmp_path, monkeypatch):
    """Runners stopped by --tune-budget never ask the oracle again, so KerasTuner's own chief would
    serve forever; their records end it, and the oracle's state is on disk for the launcher."""
    import threading

    from conftest import free_ports
    from tfx.components.tuner.component import TunerFnResult

    from models.cnn.hparams import SEARCH_SPACE
    from models.common import tuner
    from models.common.search_space import TuningSettings
    from pipeline.kubeflow.training.tuner_worker import RECORDS, serve

    (port,) = free_ports(1)
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "chief")
    monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
    monkeypatch.setenv("KERASTUNER_ORACLE_PORT", str(port))
    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=8), SEARCH_SPACE), lambda values, steps: 0.0,
                                 steps=1, default_values=None, directory=str(tmp_path / "chief"))
    records = tmp_path / RECORDS
    records.mkdir()
    later = threading.Timer(1.0, lambda: (records / "tuner0.json").write_text("{}"))
    later.start()
    serve(TunerFnResult(tuner=search, fit_kwargs={}), {"search_dir": str(tmp_path), "workers": 1}, poll_s=0.2)
    later.join(5)
    assert (tmp_path / "chief" / "search" / "oracle.json").exists()
