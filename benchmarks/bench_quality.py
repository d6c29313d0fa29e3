"""Model quality with the pipeline defaults, next to simple references on the same data.

CNN: overall eval accuracy from the Evaluator (TFMA) of a default pipeline run on the
bundled digits (target >= 0.97), and an RBF SVM (``sklearn.svm.SVC``) trained and scored in
this process on EXACTLY the same split: the train/eval TFRecords ImportExampleGen wrote in
that run. Training time: the Trainer's MLMD execution time vs the SVM's fit time.

seq2seq: top-5 (and top-1, perplexity) next-word accuracy from the Evaluator of a default
seq2seq run vs the unigram/bigram count baselines the Trainer computed on the same
transformed eval windows (``baselines.json`` in its model_run dir), and its training time.
(``benchmarks/seq2seq_quality.py`` reproduces the seq2seq number outside the pipeline.)

Runs: ``--cnn-output`` / ``--seq2seq-output`` take the --output dir of an existing run
(run_all.py passes bench_pipeline's cold runs); without them, the default pipeline runs
here (``python -m pipeline run --model M --output <work-dir>/M``).

    .venv/bin/python benchmarks/bench_quality.py                    # runs both pipelines (~6 min)
    .venv/bin/python benchmarks/bench_quality.py --cnn-output output --models cnn
    .venv/bin/python benchmarks/bench_quality.py --quick            # CNN, 20 steps (~1 min)
"""
from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_quality"


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--models", default="cnn,seq2seq")
    p.add_argument("--cnn-output", default=None)
    p.add_argument("--seq2seq-output", default=None)
    p.add_argument("--cnn-args", default="")
    p.add_argument("--seq2seq-args", default="")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/quality")
    p.add_argument("--svm-repeats", type=int, default=5, help="SVM fits to time (median)")
    args = p.parse_args(argv)
    if args.quick:
        if args.models == "cnn,seq2seq" and not args.seq2seq_output:
            args.models = "cnn"
        args.cnn_args = args.cnn_args or "--train-steps 20 --min-accuracy 0"
        args.svm_repeats = 1
    return args


def ensure_run(model: str, given, extra: str, work: Path):
    if given:
        return Path(given), None
    out = work / model
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: no cache, no pinned schema, no served model
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", model, "--output", str(out), *shlex.split(extra)]
    C.log(f"running {C.shell_command(cmd)}")
    res = C.run_timed(cmd, timeout=3600, log_path=work / f"{model}.log")
    if res["returncode"] != 0:
        raise SystemExit(f"{model} pipeline failed (log {work / f'{model}.log'}):\n{res['stderr'][-2000:]}")
    return out, {"command": C.shell_command(cmd), "wall_s": res["wall_s"]}


def latest_run(output: Path):
    """(pipeline name, {node: NodeExecution}) of the most recent run in ``output``."""
    from pipeline.results import mlmd

    store = mlmd.open_store(mlmd.sqlite_config(str(output / "metadata.sqlite")))
    names = [c.name for c in store.get_contexts_by_type("pipeline")]
    best = None
    for name in names:
        run = mlmd.latest_run(store, name)
        if run:
            newest = max(e.execution.id for e in run.values())
            if best is None or newest > best[2]:
                best = (name, run, newest)
    if best is None:
        raise SystemExit(f"No pipeline run recorded in {output}/metadata.sqlite")
    return best[0], best[1], store


def training_seconds(store, pipeline_name: str, node: str = "Trainer"):
    """Seconds of the newest execution of ``node`` that really ran (a cached one takes ~0 s)."""
    from pipeline.results import mlmd

    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.{node}")
    if context is None:
        return None
    ran = [e for e in store.get_executions_by_context(context.id)
           if mlmd.STATE_NAMES.get(e.last_known_state) == "COMPLETE"]
    if not ran:
        return None
    e = max(ran, key=lambda e: e.id)
    return max(0, e.last_update_time_since_epoch - e.create_time_since_epoch) / 1000


def uri(run, node, key):
    e = run.get(node)
    return e.outputs[key][0].uri if e is not None and e.outputs.get(key) else None


def overall_metrics(evaluation_uri: str):
    from artifacts.tfma_results import overall_metrics as read_overall_metrics

    return read_overall_metrics(evaluation_uri)


def load_split(examples_uri: str, split: str):
    import numpy as np
    import tensorflow as tf

    from data import features

    files = sorted(glob.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    xs, ys = [], []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        f = tf.train.Example.FromString(record.numpy()).features.feature
        xs.append(np.asarray(f[features.IMAGE].int64_list.value, dtype=np.float32) / 255.0)
        ys.append(f[features.LABEL_ID].int64_list.value[0])
    return np.stack(xs), np.asarray(ys)


def cnn_quality(output: Path, args):
    from sklearn.svm import SVC

    pipeline_name, run, store = latest_run(output)
    evaluation = uri(run, "Evaluator", "evaluation")
    metrics = overall_metrics(evaluation) if evaluation else {}
    examples = uri(run, "ImportExampleGen", "examples")
    x_train, y_train = load_split(examples, "train")
    x_eval, y_eval = load_split(examples, "eval")
    refs = {}
    for label, params in (("SVC rbf (sklearn defaults: C=1, gamma=scale)", {}),
                          ("SVC rbf C=10", {"C": 10.0})):
        fits, acc = [], None
        for _ in range(args.svm_repeats):
            clf = SVC(kernel="rbf", **params)
            started = time.perf_counter()
            clf.fit(x_train, y_train)
            fits.append(time.perf_counter() - started)
            acc = float((clf.predict(x_eval) == y_eval).mean())
        refs[label] = {"accuracy": acc, "fit_s": C.median(fits)}
    accuracy = metrics.get("sparse_categorical_accuracy")
    trainer = run.get("Trainer")
    return {
        "output": str(output), "pipeline_name": pipeline_name,
        "train_examples": int(len(y_train)), "eval_examples": int(len(y_eval)),
        "accuracy": accuracy, "target": 0.97, "target_met": bool(accuracy is not None and accuracy >= 0.97),
        "evaluator_metrics": metrics, "evaluation_uri": evaluation,
        "trainer_s": training_seconds(store, pipeline_name),
        "latest_trainer_state": trainer.state if trainer else None,
        "references": refs,
    }


def seq2seq_quality(output: Path):
    pipeline_name, run, store = latest_run(output)
    evaluation = uri(run, "Evaluator", "evaluation")
    metrics = overall_metrics(evaluation) if evaluation else {}
    model_run = uri(run, "Trainer", "model_run")
    baselines = {}
    if model_run and os.path.exists(os.path.join(model_run, "baselines.json")):
        baselines = json.loads(Path(model_run, "baselines.json").read_text())
    top5 = metrics.get("sparse_top_k_categorical_accuracy")
    bigram = baselines.get("bigram_top5")
    trainer = run.get("Trainer")
    return {
        "output": str(output), "pipeline_name": pipeline_name,
        "top5": top5, "top1": metrics.get("sparse_categorical_accuracy"),
        "perplexity": metrics.get("perplexity"), "eval_examples": metrics.get("example_count"),
        "baselines": baselines,
        "top5_minus_bigram": (top5 - bigram) if top5 is not None and bigram is not None else None,
        "beats_bigram": bool(top5 is not None and bigram is not None and top5 > bigram),
        "evaluator_metrics": metrics, "evaluation_uri": evaluation,
        "trainer_s": training_seconds(store, pipeline_name),
        "latest_trainer_state": trainer.state if trainer else None,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)
    import stackenv  # noqa: F401

    work = Path(args.work_dir)
    models = [m for m in args.models.split(",") if m]
    results, rows = {}, []
    if "cnn" in models:
        out, ran = ensure_run("cnn", args.cnn_output, args.cnn_args, work)
        r = cnn_quality(out, args)
        r["pipeline_run"] = ran or "reused"
        results["cnn"] = r
        how = f"run here with `{args.cnn_args}`" if args.cnn_args and not args.cnn_output else \
            ("run here, defaults" if not args.cnn_output else "given run")
        rows.append(["cnn", f"CNN pipeline ({how}; Evaluator, {r['eval_examples']} eval)", "accuracy",
                     r["accuracy"], r["trainer_s"]])
        for label, ref in r["references"].items():
            rows.append(["cnn", label + " (same split)", "accuracy", ref["accuracy"], ref["fit_s"]])
    if "seq2seq" in models:
        out, ran = ensure_run("seq2seq", args.seq2seq_output, args.seq2seq_args, work)
        r = seq2seq_quality(out)
        r["pipeline_run"] = ran or "reused"
        results["seq2seq"] = r
        how = f"run here with `{args.seq2seq_args}`" if args.seq2seq_args and not args.seq2seq_output else \
            ("run here, defaults" if not args.seq2seq_output else "given run")
        rows.append(["seq2seq", f"seq2seq pipeline ({how}; Evaluator)", "top-5", r["top5"], r["trainer_s"]])
        for key in ("bigram_top5", "unigram_top5"):
            if key in r["baselines"]:
                rows.append(["seq2seq", key.replace("_top5", "") + " counts (Trainer's baselines.json)", "top-5",
                             r["baselines"][key], None])
        rows.append(["seq2seq", "seq2seq pipeline (Evaluator)", "top-1", r["top1"], None])
        rows.append(["seq2seq", "seq2seq pipeline (Evaluator)", "perplexity", r["perplexity"], None])

    C.print_table(["model", "predictor", "metric", "value", "training s"], rows,
                  title="\nQuality on the eval split (training s: the Trainer component's run / one SVM fit)")
    if "cnn" in results:
        r = results["cnn"]
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
        print(f"CNN accuracy {acc} (target >= 0.97: {'met' if r['target_met'] else 'MISSED'}); "
              f"SVC reference {r['references']['SVC rbf (sklearn defaults: C=1, gamma=scale)']['accuracy']:.4f}")
    if "seq2seq" in results:
        r = results["seq2seq"]
        fmt4 = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
        print(f"seq2seq top-5 {fmt4(r['top5'])} vs bigram {fmt4(r['baselines'].get('bigram_top5'))}: "
              f"{'beats' if r['beats_bigram'] else 'does NOT beat'} it")
    C.write_json(NAME, {"models": results}, args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())
