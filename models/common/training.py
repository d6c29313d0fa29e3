"""Settings the pipeline hands to a family's ``run_fn`` through Trainer ``custom_config``, and
:func:`fit`, the one way every family trains under TFX.

The pipeline's typed config fills the settings; ``run_fn`` reads them back. Keeping the wire
format a dataclass means a typo fails loudly on both sides instead of silently using a default;
keeping behaviour out of it keeps it a wire format.
"""
import contextlib
import dataclasses
import math
from typing import Any

from stackenv.errors import ProjectError


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    strategy: str = "mirrored"
    batch_size: int = 64          # per replica; global batch = batch_size * replicas
    learning_rate: float = 1e-3
    epochs: int = 1               # Keras epochs the TrainArgs steps are spread over
    seed: int = 42
    jit_compile: bool = False     # XLA for the train step (benchmarks/README.md: what it gains)
    profile_batches: str = ""     # "START,END": TensorBoard profiler trace of those batches
    gate_margin: float = 0.01     # the key metric must beat the gate reference by this (references.json)
    explicit_steps: bool = False  # --train-steps given: train exactly that budget (no minimum)
    base_model: str = ""          # --base-model: a pretrained feature extractor to build on (image families)
    data_service: str = ""        # "auto" or a tf.data service dispatcher (models/common/data_service.py)
    warm_start: bool = False      # --warm-start: start from fn_args.base_model when it fits (warm_start.py)
    family: dict[str, Any] = dataclasses.field(default_factory=dict)  # family-specific

    def to_custom_config(self) -> dict[str, Any]:
        return {"training": dataclasses.asdict(self)}

    @classmethod
    def from_custom_config(cls, custom_config: dict[str, Any]) -> "TrainingSettings":
        values = dict((custom_config or {}).get("training") or {})
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown training settings {sorted(unknown)}")
        return cls(**values)

    def input_options(self) -> dict[str, Any]:
        """``make_dataset`` settings: cache, and hold splits in memory except across workers
        (the in-memory input turns tf.distribute's auto-sharding off; see its docstring)."""
        return {"cache": True, "memory_budget_bytes": 0 if self.strategy == "multi_worker" else None,
                "data_service": self.data_service}

    def steps_per_epoch(self, total_steps: int) -> int:
        return max(1, math.ceil(total_steps / max(1, self.epochs)))


def fit(settings: TrainingSettings, model, train, evaluation, fn_args, logger, validate_every_epoch: bool = False,
        callbacks: tuple = ()):
    """``model.fit`` the way every family trains under TFX: TrainArgs steps spread over
    ``settings.epochs``, one log line per epoch, TensorBoard (and profiler) in model_run_dir.

    Validation runs once at the end unless ``validate_every_epoch``: the Evaluator
    does the real evaluation. ``callbacks`` run first (e.g. ``BestWeights``).
    """
    from models.common.autograph import convert_tf_keras
    from models.common.multi_worker import worker_failures

    convert_tf_keras(False)  # faster first fit (benchmarks/README.md); see models/common/autograph.py
    with worker_failures() if settings.strategy == "multi_worker" else contextlib.nullcontext():
        return _fit(settings, model, train, evaluation, fn_args, logger, validate_every_epoch, list(callbacks))


def tensorboard(settings: TrainingSettings, log_dir: str):
    """TensorBoard logs in the Trainer's model_run dir; a profiler trace if asked for."""
    import tensorflow as tf

    return tf.keras.callbacks.TensorBoard(log_dir=log_dir, profile_batch=settings.profile_batches or 0)


def _fit(settings: TrainingSettings, model, train, evaluation, fn_args, logger, validate_every_epoch: bool,
         callbacks: list):
    import tensorflow as tf

    from models.common.callbacks import EpochLogger, StepCounter, StopAtStep

    steps_per_epoch = settings.steps_per_epoch(fn_args.train_steps)
    total = min(settings.epochs * steps_per_epoch, max(1, fn_args.train_steps or 1))  # exactly --train-steps
    epochs = math.ceil(total / steps_per_epoch)  # the last one cut short by StopAtStep
    history = model.fit(
        train,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=evaluation,
        validation_steps=max(1, fn_args.eval_steps or 1),
        validation_freq=1 if validate_every_epoch else epochs,
        # TerminateOnNaN: a nan loss would otherwise train on, and a low gate could bless it.
        callbacks=[*callbacks, tensorboard(settings, fn_args.model_run_dir), EpochLogger(logger, epochs),
                   StepCounter(total), StopAtStep(total), tf.keras.callbacks.TerminateOnNaN()],
        verbose=0,
    )
    check_finite_loss(history, settings.learning_rate)
    return history


class NonFiniteLoss(ProjectError):
    """Training diverged: the weights are not a model, so the run stops before any evaluation."""


def check_finite_loss(history, learning_rate: float) -> None:
    """Raise :class:`NonFiniteLoss` when any recorded loss is nan or inf."""
    for key, values in (getattr(history, "history", None) or {}).items():
        bad = [i for i, v in enumerate(values) if not math.isfinite(float(v))] if key.endswith("loss") else []
        if bad:
            raise NonFiniteLoss(
                f"Training stopped: the {key} became {values[bad[0]]} in epoch {bad[0] + 1}, so the weights are "
                f"not usable and nothing was evaluated or pushed. Usually the learning rate ({learning_rate}) "
                "is too high or the data holds extreme values; lower --learning-rate (e.g. 0.0001) or check "
                "the data, then run again.")
