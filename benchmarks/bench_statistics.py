"""StatisticsGen's TFDV pass with exact top values and unique counts against sketches, interleaved in one run.

The project's StatisticsGen asks TFDV for sketch-based top values and unique counts (pipeline/graph.py):
Misra-Gries (1,024 counters) and KMV (16,384 hashes) are exact below those numbers of distinct values,
which holds every class and slice feature, and approximate only where a value is unique per example
(``example_id``), where the exact path counts every value in a shuffle. This times
``tfdv.generate_statistics_from_tfrecord`` on an ExampleGen output both ways (Beam in_memory, one worker,
as a local run), checks that the class and slice counts agree exactly, and prints the ratio.

    python benchmarks/bench_statistics.py EXAMPLES_URI            # e.g. <run>/tfx/cnn-pipeline/ImportExampleGen/examples/1
    python benchmarks/bench_statistics.py EXAMPLES_URI --rounds 3

Results: docs/history/benchmarks-log.md ("Against TFX's own example").
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_statistics"
EXACT_FEATURES = ("label", "brightness")


def main(argv=None) -> None:
    p = C.base_parser(__doc__.split("\n")[0])
    p.add_argument("examples", help="an ExampleGen output folder (holding Split-*)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)

    import stackenv  # noqa: F401  (before TensorFlow)

    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions

    location = f"{args.examples}/Split-*/*"
    beam = PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    options = {"exact": tfdv.StatsOptions(), "sketch": tfdv.StatsOptions(use_sketch_based_topk_uniques=True)}
    results = {}

    def variant(name):
        def run():
            results[name] = tfdv.generate_statistics_from_tfrecord(location, stats_options=options[name],
                                                                     pipeline_options=beam)
        return run

    rounds = 1 if args.quick else args.rounds
    samples = C.interleave({name: variant(name) for name in options}, rounds=rounds, warmup=0)
    counts = {}
    for name, stats in results.items():
        features = {f.path.step[0]: f.string_stats for f in stats.datasets[0].features}
        counts[name] = {key: ({b.label: int(b.sample_count) for b in features[key].rank_histogram.buckets},
                              int(features[key].unique)) for key in EXACT_FEATURES if key in features}
        counts[name]["examples"] = int(stats.datasets[0].num_examples)
    same = counts["exact"] == counts["sketch"]
    exact, sketch = C.median(samples["exact"]), C.median(samples["sketch"])
    C.print_table(["variant", "median s", "rounds"], [[name, C.median(v), len(v)] for name, v in samples.items()],
                  title=f"TFDV statistics of {counts['exact']['examples']:,} examples")
    print(f"sketch / exact: {C.ratio(sketch, exact):.2f}x; class and slice counts identical: {same}")
    C.write_json(NAME, {"seconds": samples, "ratio": C.ratio(sketch, exact), "counts_identical": same,
                        "examples": counts["exact"]["examples"]}, args, C.machine_info())
    if not same:
        raise SystemExit(f"counts differ: {counts}")


if __name__ == "__main__":
    main()
