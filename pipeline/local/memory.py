"""Memory-hungry settings checked against the memory this machine has, before a local run starts.

The ranges of ``pipeline/config.py`` bound each flag alone; a combination can still ask for more than
the machine has (``--batch-size 65536 --image-size 1024``), and the kernel's OOM killer then ends the
run minutes later, or the machine swaps. Each estimate is the part of a step's memory that grows with
the settings:

- the Trainer's batch: ``--batch-size`` x the family's bytes per example (``ModelFamily.memory``:
  a formula of its settings times a factor measured as the growth of peak RSS between two batch sizes,
  ``benchmarks/memory_factors.py``);
- the Evaluator's batch: ``--eval-batch`` x the family's bytes of one example's model outputs
  (``Memory.eval_output_bytes``, a text model's probabilities over its vocabulary) x
  ``EVAL_FACTOR`` (the copies TFMA makes of them, measured by ``benchmarks/bench_evaluator_memory.py``),
  twice when a served model is there to compare with (TFMA runs both);
- ``--beam-mode multi_processing``: ``--beam-workers`` SDK worker processes, each holding TensorFlow,
  TFX and Beam (``WORKER_BYTES``: the RSS of those imports, measured by the same script).

A process's fixed memory (TensorFlow itself, the data) is left out, so an estimate is a lower bound:
a setting refused here cannot fit; one accepted may still need more. Available memory is the kernel's
MemAvailable, or less when a cgroup limit (v2 or v1, as in a container) leaves less room
(``stackenv.memory.available_bytes``). The text Trainer weighs its count model against the same figure
before it reads the corpus (models/seq2seq/memory.py).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from stackenv.errors import ConfigError
from stackenv.memory import available_bytes, memory_text

from pipeline.families import get_family

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig

#: RSS of one Beam SDK worker's imports (TensorFlow, TFX, Beam), rounded up from
#: ``benchmarks/memory_factors.py``; a worker running a component holds more.
WORKER_BYTES = 900 * 2**20
#: Growth of the Evaluator's peak RSS per example of its batch over the bytes of the model's outputs:
#: what ``benchmarks/bench_evaluator_memory.py`` measured between two --eval-batch values, rounded up.
EVAL_FACTOR = 20.0


@dataclasses.dataclass(frozen=True)
class Demand:
    flag: str
    value: int
    bytes_needed: float
    what: str   # what needs it, in words
    fix: str    # a value that fits, in words


def largest_batch(config: PipelineConfig, available: int) -> int:
    """The largest --batch-size whose estimate fits in ``available`` (0: not even one example)."""
    memory = get_family(config.model).memory
    return int(available // memory.batch(config).bytes_per_example) if memory else config.batch_size


def trainer_demand(config: PipelineConfig, available: int) -> Demand | None:
    memory = get_family(config.model).memory
    if memory is None:
        return None
    estimate = memory.batch(config)
    fits = largest_batch(config, available)
    fix = (f"--batch-size {min(fits, config.batch_size)} or less fits" if fits >= 1
           else f"even a batch of 1 does not fit: lower {estimate.smaller}")
    return Demand("--batch-size", config.batch_size, config.batch_size * estimate.bytes_per_example,
                  f"one training batch of {estimate.shape} (about {estimate.bytes_per_example / 2**20:.1f} MiB per "
                  "example)", fix)


def evaluator_demand(config: PipelineConfig, available: int) -> Demand | None:
    memory = get_family(config.model).memory
    output_bytes = memory.eval_output_bytes if memory else None
    if output_bytes is None:
        return None
    from artifacts.serving_dir import latest_version_dir

    models = 2 if latest_version_dir(config.serving_model_dir) else 1
    per_example = EVAL_FACTOR * output_bytes(config) * models
    fits = int(available // per_example)
    fix = (f"--eval-batch {min(fits, config.eval_batch)} or less fits" if fits >= 1
           else "even a batch of 1 does not fit: lower the model's output size (--vocab-size)")
    compared = " and the served model's" if models == 2 else ""
    return Demand("--eval-batch", config.eval_batch, config.eval_batch * per_example,
                  f"the Evaluator's batches of the candidate's{compared} outputs (about "
                  f"{per_example / 2**20:.1f} MiB per example with TFMA's copies)", fix)


def beam_demand(config: PipelineConfig, available: int) -> Demand | None:
    if config.beam_mode != "multi_processing":  # auto picks it only for big data on many cores
        return None
    fits = int(available // WORKER_BYTES)
    fix = (f"--beam-workers {min(fits, config.beam_workers)} or fewer fits" if fits >= 1
           else "not even one worker fits: use --beam-mode in_memory")
    return Demand("--beam-workers", config.beam_workers, config.beam_workers * WORKER_BYTES,
                  f"{config.beam_workers} Beam SDK worker processes of --beam-mode multi_processing (about "
                  f"{WORKER_BYTES / 2**20:.0f} MiB each)", fix)


def check_memory(config: PipelineConfig, available: tuple[int, str] | None = None) -> None:
    """ConfigError naming the first setting whose estimate exceeds the memory available."""
    free, source = available or available_bytes()
    for demand in (trainer_demand(config, free), evaluator_demand(config, free), beam_demand(config, free)):
        if demand is not None and demand.bytes_needed > free:
            raise ConfigError(demand.flag, (
                f"{demand.value} needs at least {memory_text(demand.bytes_needed)} for {demand.what}, and this machine "
                f"has {memory_text(free)} available ({source}). {demand.fix[:1].upper()}{demand.fix[1:]}; the estimate "
                "leaves out TensorFlow's own memory, so leave room (pipeline/local/memory.py)."))
