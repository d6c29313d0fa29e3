"""A small Beam job on PortableRunner whose SDK workers come from an external pool.

``python tests/support/beam_pool_job.py PORT IMAGE...``: the runner options are the ones the
README gives for ``run --beam-arg=...`` with ``python -m pipeline beam-pool``. Each worker decodes
its images with the project's own reader (data/images/pixels.py) and says which interpreter and
which project it ran, so a test sees what the pool's workers really were
(tests/test_portable.py). Prints one JSON line; leaves with ``os._exit`` (Beam's gRPC threads
can hold a normal exit).
"""
import json
import os
import sys


def decode(path: str) -> dict:
    """Runs in a pool's worker: imports here, not at module level (dill pickles this function by value)."""
    import os
    import sys

    import data
    from data.images.pixels import load_image_file

    pixels = load_image_file(path, (8, 8, 1))
    return {"file": os.path.basename(path), "sum": int(pixels.sum()), "shape": list(pixels.shape),
            "python": sys.executable, "project": os.path.dirname(os.path.dirname(os.path.abspath(data.__file__))),
            "pid": os.getpid()}


def main(port: int, images: list[str]) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL",
                               f"--environment_config=localhost:{port}"])
    found: list[dict] = []
    with beam.Pipeline(options=options) as pipeline:
        decoded = pipeline | beam.Create(images) | beam.Map(decode)
        # The results come back through a file: the launching process is not a worker.
        _ = decoded | beam.Map(json.dumps) | beam.io.WriteToText(os.environ["JOB_OUTPUT"], num_shards=1,
                                                                 shard_name_template="")
    with open(os.environ["JOB_OUTPUT"]) as handle:
        found = [json.loads(line) for line in handle if line.strip()]
    print(json.dumps({"decoded": found, "runner_pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
    sys.stdout.flush()
    os._exit(0)
