"""A family's search space as plain data: what the Tuner explores and what a hyperparameters
file may name.

Why plain data instead of KerasTuner calls: the CLI checks a ``--hyperparameters`` file
against the family's knobs before anything runs, and that must not import TensorFlow or
KerasTuner (``pipeline/families/`` stays cheap). ``models/common/tuner.py`` turns these
into KerasTuner hyperparameters when a search runs.
"""
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

KINDS = ("int", "float", "choice")
#: KerasTuner's search algorithms ``--tune-algorithm`` offers (models/common/tuner.py).
ALGORITHMS = ("random", "bayesian", "hyperband")


@dataclasses.dataclass(frozen=True)
class Knob:
    """One tunable setting. ``default`` is the untuned value the Trainer uses without a search."""

    name: str
    kind: str                          # "int", "float" or "choice"
    default: Any
    low: float | None = None           # int/float
    high: float | None = None
    step: float | None = None          # int/float: None = continuous (float) or 1 (int)
    log: bool = False                  # float: sample on a log scale (learning rates)
    values: tuple[Any, ...] = ()       # choice

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Knob {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "choice" and self.default not in self.values:
            raise ValueError(f"Knob {self.name!r}: default {self.default!r} is not one of {self.values}")
        if self.kind != "choice" and not (self.low <= self.default <= self.high):
            raise ValueError(f"Knob {self.name!r}: default {self.default!r} outside [{self.low}, {self.high}]")

    def describe(self) -> str:
        if self.kind == "choice":
            return f"{self.name} in {{{', '.join(map(str, self.values))}}}"
        scale = ", log scale" if self.log else ""
        return f"{self.name} in [{self.low}, {self.high}]{scale}"


def names(space: Sequence[Knob]) -> tuple[str, ...]:
    return tuple(knob.name for knob in space)


def defaults(space: Sequence[Knob]) -> dict[str, Any]:
    """The untuned values: the point a search is compared against."""
    return {knob.name: knob.default for knob in space}


#: Keys KerasTuner's Hyperband adds to a trial's values (not model settings).
TUNER_KEYS_PREFIX = "tuner/"


def values_of(hyperparameters: Any) -> dict[str, Any]:
    """The model settings in a KerasTuner HyperParameters config (the Trainer's
    ``fn_args.hyperparameters``, or a best_hyperparameters.txt read as JSON); {} for None.

    Reads the config's ``values`` without importing KerasTuner (the Trainer need not load it).
    """
    if not hyperparameters:
        return {}
    values = hyperparameters.get("values", hyperparameters) if isinstance(hyperparameters, dict) else {}
    return {k: v for k, v in values.items() if not str(k).startswith(TUNER_KEYS_PREFIX)}


@dataclasses.dataclass(frozen=True)
class TuningSettings:
    """What the pipeline hands a family's ``tuner_fn`` through the Tuner's ``custom_config``."""

    trials: int = 4
    algorithm: str = "random"
    budget_seconds: float = 0.0     # 0: no wall-time budget
    seed: int = 42
    max_examples: int = 5000        # trials train and score on a bounded subsample of train

    def to_custom_config(self) -> dict[str, Any]:
        return {"tuning": dataclasses.asdict(self)}

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> "TuningSettings":
        values = dict((custom_config or {}).get("tuning") or {})
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown tuning settings {sorted(unknown)}")
        return cls(**values)
