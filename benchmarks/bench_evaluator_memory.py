"""Peak memory of the Evaluator against the eval windows it reads, bisected layer by layer.

Each variant runs in a fresh child process on the same examples; the parent samples the
resident memory of the child's process tree (psutil, every 0.5 s) and kills a child past
``--max-rss-gib``. Variants (``--variants``, comma-separated, each run at every ``--eval-copies``):

- ``project``: the project's Evaluator executor (``components/evaluator.py``), no served model;
- ``project+baseline``: the same with a served model (a copy of the candidate), so TFMA runs two
  models and compares them, as the pipeline does once a model is pushed;
- ``tfx``: TFX's stock Evaluator executor, the same eval config (no reference gate, no size batching);
- ``tfma``: ``tfma.run_model_analysis`` on the eval files, the same model and eval config;
- ``tfx+bytes``: TFX's stock executor inside the project's batching by size (``stackenv.compat.byte_size_batching``);
- any of them followed by ``/noslice``: the eval config without its slicing specs but the overall one;
  ``project/nobytes``: the project's executor without the batching by size; ``project/cap=N``: with
  batches of at most N records; ``project/positional``: without ``compat.tfma_calls_signatures_by_name``
  (TFMA calls the signatures positionally, as it does on its own).

The eval config is the one the run's Evaluator received (its execution's ``eval_config`` in MLMD),
so any family's run works. ``--eval-copies 1,4,16`` evaluates the eval split that many times over
(its files copied): more windows, the same model. The slope between two sizes is the memory held
per window read.

    python benchmarks/bench_evaluator_memory.py --run /tmp/wt45mem-run --pipeline-name seq2seq-pipeline \\
        --variants project,tfma --eval-copies 2,8
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402
from bench_evaluator import copied_eval_split, eval_files, latest_evaluation  # noqa: E402

NAME = "bench_evaluator_memory"


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--run", required=True, help="output folder of a finished `pipeline run`")
    p.add_argument("--pipeline-name", default="seq2seq-pipeline")
    p.add_argument("--variants", default="project,tfma")
    p.add_argument("--eval-copies", default="1,4", help="comma-separated: the eval split this many times over")
    p.add_argument("--beam-arg", action="append", default=[],
                   help="a Beam pipeline arg for every variant (repeatable); default --direct_running_mode=in_memory")
    p.add_argument("--max-rss-gib", type=float, default=12.0, help="kill a child whose process tree exceeds this")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/evaluator-memory")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_inputs(run: Path) -> dict:
    """The latest Evaluator execution's examples, model and eval config, from the run's MLMD."""
    from components.data_facts import facts_of

    execution, inputs = latest_evaluation(run)
    return {"examples": inputs["Examples"].uri, "facts": facts_of(inputs["Examples"]), "model": inputs["Model"].uri,
            "eval_config": execution.custom_properties["eval_config"].string_value}


# ------------------------------------------------------------------------------ child


def child(inputs: dict, out: Path) -> dict:
    import stackenv  # noqa: F401
    from stackenv.tfma import tfma

    from google.protobuf import json_format

    variant, _, option = inputs["variant"].partition("/")
    config = json_format.Parse(inputs["eval_config"], tfma.EvalConfig())
    if option == "noslice":
        del config.slicing_specs[:]
        config.slicing_specs.add()
    config_json = json_format.MessageToJson(config)
    started = time.perf_counter()
    if variant == "tfma":
        run_tfma(inputs, config, out)
    else:
        run_executor(variant, option, inputs, config_json, out)
    return {"seconds": time.perf_counter() - started}


def run_tfma(inputs: dict, config, out: Path) -> None:
    from stackenv.tfma import tfma

    from apache_beam.options.pipeline_options import PipelineOptions

    for spec in config.metrics_specs:  # no baseline here: TFMA refuses change thresholds without one
        for metric in spec.metrics:
            metric.threshold.ClearField("change_threshold")
            for per_slice in metric.per_slice_thresholds:
                per_slice.threshold.ClearField("change_threshold")
    model = tfma.default_eval_shared_model(eval_saved_model_path=str(Path(inputs["model"], "Format-Serving")),
                                           eval_config=config)
    pattern = str(Path(inputs["examples"], "Split-eval", "*"))
    tfma.run_model_analysis(eval_shared_model=model, eval_config=config, data_location=pattern,
                            output_path=str(out / "evaluation"),
                            pipeline_options=PipelineOptions(flags=inputs["beam_args"]))


def run_executor(variant: str, option: str, inputs: dict, config_json: str, out: Path) -> None:
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as spec

    import components.evaluator as project

    examples = standard_artifacts.Examples()
    examples.uri, examples.split_names = inputs["examples"], json.dumps(["train", "eval"])
    if inputs.get("facts"):
        from components.data_facts import publish

        publish(examples, inputs["facts"])
    model = standard_artifacts.Model()
    model.uri = inputs["model"]
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(out / "evaluation"), str(out / "blessing")
    properties = {spec.EVAL_CONFIG_KEY: config_json, spec.EXAMPLE_SPLITS_KEY: "null"}
    context = BaseBeamExecutor.Context(beam_pipeline_args=inputs["beam_args"])
    if option.startswith("cap="):  # the project's executor, batches capped at this many records
        import components.evaluator as capped

        capped.EVAL_BATCH_RECORDS = int(option[4:])
    if option == "nobytes":  # the project's executor without tfx_bsl's batching by size
        import contextlib

        from stackenv import compat

        compat.byte_size_batching = contextlib.nullcontext
    if option == "positional":  # TFMA's own positional signature calls
        import contextlib

        from stackenv import compat

        compat.tfma_calls_signatures_by_name = contextlib.nullcontext
    if variant.startswith("tfx"):
        from tfx.components.evaluator import executor as stock

        executor = stock.Executor(context)
        if variant == "tfx+bytes":  # TFX's executor inside the project's batching by size
            from stackenv import compat

            with compat.byte_size_batching():
                executor.Do({spec.EXAMPLES_KEY: [examples], spec.MODEL_KEY: [model]},
                            {spec.EVALUATION_KEY: [evaluation], spec.BLESSING_KEY: [blessing]}, properties)
            return
    else:
        executor = project.Executor(context)
        served = ""
        if variant == "project+baseline":  # a served model: the candidate itself, as version 1
            served = str(out / "serving")
            shutil.copytree(Path(inputs["model"], "Format-Serving"), Path(served, "1"))
        properties[project.BASELINE_SERVING_DIR_KEY] = served
    executor.Do({spec.EXAMPLES_KEY: [examples], spec.MODEL_KEY: [model]},
                {spec.EVALUATION_KEY: [evaluation], spec.BLESSING_KEY: [blessing]}, properties)


# ------------------------------------------------------------------------------ parent


def run_child(inputs: dict, out: Path, max_rss_gib: float) -> dict:
    import psutil

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "inputs.json").write_text(json.dumps(inputs))
    cmd = [C.PYTHON, str(Path(__file__).resolve()), "--run", "-", "--child", str(out)]
    stdout = open(out / "stdout", "w")
    stderr = open(out / "stderr", "w")
    process = subprocess.Popen(cmd, cwd=str(C.PROJECT_ROOT), stdout=stdout, stderr=stderr,
                               env={**os.environ, "PYTHONPATH": str(C.PROJECT_ROOT)})
    started, peak, killed = time.time(), 0, False
    samples: list[tuple[float, int]] = []
    root = psutil.Process(process.pid)
    while process.poll() is None:
        total = 0
        try:
            for proc in [root, *root.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        samples.append((round(time.time() - started, 1), total))
        peak = max(peak, total)
        if total > max_rss_gib * 2**30:
            killed = True
            for proc in root.children(recursive=True):
                proc.kill()
            process.kill()
            break
        time.sleep(0.5)
    process.wait()
    stdout.close()
    stderr.close()
    result = {"peak_rss_gib": round(peak / 2**30, 3), "killed": killed, "returncode": process.returncode,
              "wall_s": round(time.time() - started, 1), "samples": samples[::4]}
    if process.returncode == 0:
        result.update(json.loads((out / "stdout").read_text().strip().splitlines()[-1]))
    elif not killed:
        raise SystemExit(f"{inputs['variant']} failed:\n{(out / 'stderr').read_text()[-3000:]}")
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        out = Path(args.child)
        print(json.dumps(child(json.loads((out / "inputs.json").read_text()), out)))
        return 0
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    base = run_inputs(Path(args.run))
    beam_args = args.beam_arg or ["--direct_running_mode=in_memory"]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    copies_list = [int(c) for c in args.eval_copies.split(",")]
    per_copy = sum(1 for _ in _records(eval_files(base["examples"])))
    rows, results = [], []
    contention = C.Contention()
    for copies in copies_list:
        inputs = dict(base, beam_args=beam_args)
        if copies > 1:
            inputs["examples"] = copied_eval_split(base["examples"], copies, Path(args.work_dir) / "examples")
            facts = json.loads(json.dumps(base.get("facts") or {}))
            if "eval" in (facts.get("split_counts") or {}):
                facts["split_counts"]["eval"] *= copies
            inputs["facts"] = facts
        windows = per_copy * copies
        for variant in variants:
            C.log(f"{variant} on {windows:,} windows ...")
            result = run_child(dict(inputs, variant=variant), Path(args.work_dir) / variant.replace("/", "_"),
                               args.max_rss_gib)
            result.update(variant=variant, windows=windows)
            results.append(result)
            C.log(f"{variant} on {windows:,} windows: peak {result['peak_rss_gib']:.2f} GiB, "
                  f"{result['wall_s']:.0f} s" + (" (killed)" if result["killed"] else ""))
            rows.append([variant, windows, C.fmt(result["peak_rss_gib"]), C.fmt(result["wall_s"]),
                         "killed" if result["killed"] else ""])
    C.print_table(["variant", "eval windows", "peak RSS GiB", "wall s", ""], rows,
                  title="Evaluator peak memory (process tree) by layer and window count")
    for variant in variants:
        mine = sorted((r["windows"], r["peak_rss_gib"]) for r in results if r["variant"] == variant and not r["killed"])
        if len(mine) >= 2 and mine[-1][0] > mine[0][0]:
            slope = (mine[-1][1] - mine[0][1]) * 2**30 / (mine[-1][0] - mine[0][0])
            print(f"{variant}: {slope / 1024:.1f} KB per window between {mine[0][0]:,} and {mine[-1][0]:,} windows")
    C.write_json(NAME, {"results": results, "beam_args": beam_args}, args, machine, contention)
    return 0


def _records(files: list[str]):
    import stackenv  # noqa: F401

    import tensorflow as tf

    return tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()


if __name__ == "__main__":
    sys.exit(main())
