"""The Evaluator (TFMA) beside a plain batched predict + numpy metrics loop, interleaved in one run.

- ``reference``: in a child process, timed from loading the SavedModel on: read the eval split's records, call
  ``serving_default`` in batches of ``--batch``, and compute the same metrics in numpy
  (example count, accuracy, balanced accuracy, macro F1, per-class precision and recall
  at 0.5, the confusion matrix) on the same slices (overall, by label, by brightness);
- ``evaluator``: the project's Evaluator executor (``components/evaluator.py``, TFX's and
  TFMA's code underneath) on Beam's DirectRunner in_memory, in a child process, timed
  around ``Do`` alone, with the CNN family's eval config (``models/cnn/evaluation.py``);
- ``evaluator@DIR`` (``--baseline DIR``): the same from another checkout, to show a
  change's effect in the same run.

After the rounds, the metric values each variant produced are compared slice by slice:
every TFMA variant against the first (the metrics must not change with the feeding), and
the reference against TFMA (the same numbers computed another way).

Needs a finished CNN run: ``--run OUTPUT`` of ``python -m pipeline run --model cnn``
(the inputs of its latest Evaluator execution: examples and Trainer model, from MLMD).

    python benchmarks/bench_evaluator.py --run /tmp/scale/run20k --rounds 3
    python benchmarks/bench_evaluator.py --run /tmp/scale/run20k --baseline /path/to/other/checkout
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_evaluator"


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--run", required=True, help="output folder of a finished `pipeline run --model cnn`")
    p.add_argument("--pipeline-name", default="cnn-pipeline")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=1024, help="the reference's predict batch size")
    p.add_argument("--baseline", default=None, help="another checkout whose Evaluator runs beside this one")
    p.add_argument("--eval-copies", type=int, default=1,
                   help="evaluate the eval split this many times over (its files copied): more examples, same model")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/evaluator")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--code", default=str(C.PROJECT_ROOT), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def latest_evaluation(run: Path, make_one: str = "python -m pipeline run"):
    """The latest Evaluator execution of a run's MLMD and its input artifacts by type name."""
    import stackenv  # noqa: F401

    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(run / "metadata.sqlite")
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(config)
    types = {t.id: t.name for t in store.get_execution_types()}
    evaluations = [e for e in store.get_executions() if "Evaluator" in types[e.type_id]]
    if not evaluations:
        raise SystemExit(f"{run} has no Evaluator execution: run `{make_one}` there first")
    execution = evaluations[-1]
    inputs = {}
    for event in store.get_events_by_execution_ids([execution.id]):
        artifact = store.get_artifacts_by_id([event.artifact_id])[0]
        kind = store.get_artifact_types_by_id([artifact.type_id])[0].name
        if event.type == metadata_store_pb2.Event.INPUT:
            inputs[kind] = artifact
    return execution, inputs


def run_inputs(run: Path, pipeline_name: str) -> dict:
    """The latest Evaluator execution's inputs, from the run's MLMD."""
    from components.data_facts import facts_of

    _, inputs = latest_evaluation(run, "python -m pipeline run --model cnn")
    return {"examples": inputs["Examples"].uri, "facts": facts_of(inputs["Examples"]), "model": inputs["Model"].uri,
            "min_accuracy": 0.0, "max_regression": 0.01}


def copied_eval_split(examples_uri: str, copies: int, out: Path) -> str:
    """An Examples folder whose eval split is the run's ``copies`` times over."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "Split-eval").mkdir(parents=True)
    (out / "Split-train").mkdir()
    for k in range(copies):
        for path in eval_files(examples_uri):
            shutil.copy(path, out / "Split-eval" / f"copy{k}-{Path(path).name}")
    return str(out)


def eval_files(examples_uri: str) -> list[str]:
    return sorted(str(p) for p in Path(examples_uri, "Split-eval").glob("*"))


# ------------------------------------------------------------------------------ reference


def reference(model_dir: str, files: list[str], batch: int) -> dict:
    """Predict in batches, then the Evaluator's metrics in numpy, per slice."""
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    spec = {"label_id": tf.io.FixedLenFeature([], tf.int64), "brightness": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.string)}
    probabilities, labels, names, brightness = [], [], [], []
    for records in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(batch):
        probabilities.append(serve(examples=records)["probabilities"].numpy())
        parsed = tf.io.parse_example(records, spec)
        labels.append(parsed["label_id"].numpy())
        names.append(parsed["label"].numpy())
        brightness.append(parsed["brightness"].numpy())
    p, y = np.concatenate(probabilities), np.concatenate(labels)
    label_names, bright = np.concatenate(names), np.concatenate(brightness)
    slices = {"overall": np.ones(len(y), bool)}
    slices.update({f"label={v.decode()}": label_names == v for v in np.unique(label_names)})
    slices.update({f"brightness={v.decode()}": bright == v for v in np.unique(bright)})
    return {name: numpy_metrics(p[mask], y[mask], p.shape[1]) for name, mask in slices.items()}


def numpy_metrics(p, y, classes: int) -> dict[str, float]:
    import numpy as np

    predicted = p.argmax(axis=1)
    matrix = np.zeros((classes, classes), np.int64)
    np.add.at(matrix, (y, predicted), 1)
    tp, support, guessed = np.diag(matrix), matrix.sum(axis=1), matrix.sum(axis=0)
    present = support > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(present, tp / np.maximum(support, 1), 0)
        f1 = np.where(present, 2 * tp / np.maximum(support + guessed, 1), 0)
    out = {"example_count": float(len(y)), "sparse_categorical_accuracy": float((predicted == y).mean()),
           "balanced_accuracy": float(recall[present].mean()), "macro_f1": float(f1[present].mean())}
    for k in range(classes):  # TFMA's binarized Precision / Recall: class k's probability > 0.5
        hit, truth = p[:, k] > 0.5, y == k
        tp_k = float((hit & truth).sum())
        out[f"classId:{k}/precision"] = tp_k / hit.sum() if hit.sum() else float("nan")
        out[f"classId:{k}/recall"] = tp_k / truth.sum() if truth.sum() else float("nan")
    return out


# ------------------------------------------------------------------------------ TFMA


def child(inputs: dict, out: Path) -> dict:
    """In a fresh process: the project's Evaluator ``Do`` timed alone; its metrics per slice."""
    import stackenv  # noqa: F401

    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as spec

    import components.evaluator as under_test

    assert Path(under_test.__file__).resolve().is_relative_to(Path(sys.path[0]).resolve()), under_test.__file__
    examples = standard_artifacts.Examples()
    examples.uri, examples.split_names = inputs["examples"], json.dumps(["train", "eval"])
    if inputs.get("facts"):  # what the ExampleGen recorded on the run's Examples (components/data_facts.py)
        from components.data_facts import publish

        publish(examples, inputs["facts"])
    model = standard_artifacts.Model()
    model.uri = inputs["model"]
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(out / "evaluation"), str(out / "blessing")
    # The eval config the checkout under test builds (its metrics), as the graph passes it; the
    # class count is left to the ExampleGen's facts, as for a graph compiled without the data.
    from tfx.utils import proto_utils

    from models.cnn.evaluation import eval_config

    config = proto_utils.proto_to_json(eval_config(0, inputs["min_accuracy"], inputs["max_regression"]))
    executor = under_test.Executor(BaseBeamExecutor.Context(beam_pipeline_args=["--direct_running_mode=in_memory"]))
    started = time.perf_counter()
    executor.Do({spec.EXAMPLES_KEY: [examples], spec.MODEL_KEY: [model]},
                {spec.EVALUATION_KEY: [evaluation], spec.BLESSING_KEY: [blessing]},
                {spec.EVAL_CONFIG_KEY: config, spec.EXAMPLE_SPLITS_KEY: "null",
                 under_test.BASELINE_SERVING_DIR_KEY: ""})
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "metrics": tfma_metrics(evaluation.uri)}


def tfma_metrics(evaluation_uri: str) -> dict[str, dict[str, float]]:
    from artifacts.tfma_results import load_result, scalar, slice_name

    metrics: dict[str, dict[str, float]] = {}
    for slice_key, by_output in load_result(evaluation_uri).slicing_metrics:
        values = metrics.setdefault(slice_name(slice_key), {})
        for sub_key, by_name in by_output.get("", {}).items():
            for name, value in by_name.items():
                number = scalar(value)
                if number is not None:
                    values[f"{sub_key}/{name}" if sub_key else name] = number
    return metrics


def run_child(code: Path, inputs: dict, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "inputs.json").write_text(json.dumps(inputs))
    cmd = [C.PYTHON, str(Path(__file__).resolve()), "--run", "-", "--child", str(out), "--code", str(code)]
    process = subprocess.run(cmd, cwd=str(code), env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True,
                             text=True, timeout=6 * 3600)
    if process.returncode != 0:
        raise SystemExit(f"evaluator ({code}) failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def differences(a: dict, b: dict, tolerance: float) -> list[str]:
    """Metrics present in both whose values differ by more than ``tolerance`` (NaN equals NaN)."""
    found = []
    for slice_name in sorted(set(a) & set(b)):
        for name in sorted(set(a[slice_name]) & set(b[slice_name])):
            x, y = a[slice_name][name], b[slice_name][name]
            if not (math.isnan(x) and math.isnan(y)) and not abs(x - y) <= tolerance:
                found.append(f"{slice_name} {name}: {x} vs {y}")
    return found


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        sys.path = [p for p in sys.path if Path(p or ".").resolve() != C.PROJECT_ROOT]
        sys.path.insert(0, args.code)
        out = Path(args.child)
        inputs = json.loads((out / "inputs.json").read_text())
        if "reference" in inputs:  # in a fresh process too: nothing loaded or traced before
            import stackenv  # noqa: F401

            started = time.perf_counter()
            metrics = reference(*inputs["reference"])
            print(json.dumps({"seconds": time.perf_counter() - started, "metrics": metrics}))
            return 0
        print(json.dumps(child(inputs, out)))
        return 0
    rounds = 1 if args.quick else args.rounds
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    inputs = run_inputs(Path(args.run), args.pipeline_name)
    if args.eval_copies > 1:
        inputs["examples"] = copied_eval_split(inputs["examples"], args.eval_copies, Path(args.work_dir) / "examples")
        counts = (inputs.get("facts") or {}).get("split_counts") or {}
        if "eval" in counts:  # the gate's interval is on the examples evaluated
            counts["eval"] *= args.eval_copies
    files = eval_files(inputs["examples"])
    model_dir = str(Path(inputs["model"], "Format-Serving"))
    contention = C.Contention()
    codes = {"evaluator": C.PROJECT_ROOT}
    if args.baseline:
        codes[f"evaluator@{args.baseline}"] = Path(args.baseline).resolve()
    results: dict[str, dict] = {}

    def tfma_step(name: str, code: Path):
        def run() -> float:
            results[name] = run_child(code, inputs, Path(args.work_dir) / name.replace("/", "_"))
            return results[name]["seconds"]
        return run

    def reference_step() -> float:
        results["reference"] = run_child(C.PROJECT_ROOT, {"reference": [model_dir, files, args.batch]},
                                         Path(args.work_dir) / "reference")
        return results["reference"]["seconds"]

    variants = {"reference": reference_step, **{name: tfma_step(name, code) for name, code in codes.items()}}
    samples = C.interleave(variants, rounds, warmup=0, on_round=lambda r, t: C.log(
        f"round {r + 1}: " + ", ".join(f"{n} {s:.1f} s" for n, s in t.items())))
    count = int(results["reference"]["metrics"]["overall"]["example_count"])
    ref = samples["reference"]
    rows = [[name, count, C.fmt(C.median(s)), C.fmt(C.rate(count, C.median(s))),
             C.fmt(C.ratio(C.median(ref), C.median(s))), C.fmt(C.paired_ratio(ref, s))]
            for name, s in samples.items()]
    C.print_table(["variant", "eval examples", "median s", "examples/s", "speed / reference (medians)",
                   "speed / reference (paired)"], rows,
                  title=f"Evaluator beside a batched predict + numpy metrics loop, {rounds} rounds")
    first = next(iter(codes))
    checks = {name: differences(results[first]["metrics"], results[name]["metrics"], 1e-6) for name in codes}
    checks["reference"] = differences(results[first]["metrics"], results["reference"]["metrics"], 1e-4)
    compared = sum(len(set(results[first]["metrics"].get(s, {})) & set(v)) for s, v in
                   results["reference"]["metrics"].items())
    for name, found in checks.items():
        print(f"metrics of {name} vs {first}: " + ("the same" if not found else f"{len(found)} differ: {found[:8]}")
              + (f" ({compared} values compared)" if name == "reference" else ""))
    C.write_json(NAME, {"eval_examples": count, "samples_s": samples, "metric_differences": checks,
                        "metrics": {name: r["metrics"] for name, r in results.items()}}, args, machine, contention)
    return 1 if any(checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
