"""The CNN's hyperparameters: ONE typed object the Trainer reads (and a tuner could write).

Defaults are what the side-by-side measurements chose (benchmarks/README.md, "Your own
images"); ``TrainingSettings.family["hparams"]`` overrides them, and an unknown name or
a wrong value fails loudly instead of being ignored.
"""
import dataclasses
from collections.abc import Mapping
from typing import Any

from models.common.search_space import Knob

AUGMENTATIONS = ("translate", "zoom", "contrast", "flip")
AUTO_AUGMENT = ("translate", "zoom")
AUTO_AUGMENT_MIN_SIZE = 16
CLASS_WEIGHT_MODES = ("auto", "on", "off")
KERNEL_HEAD_MODES = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class CnnHyperparameters:
    filters: int = 16              # first block; doubles per block
    convs_per_block: int = 1       # conv layers before each pooling
    max_blocks: int = 3            # conv+pool blocks, fewer while the map would drop below 2x2
    dense_units: int = 0           # hidden dense layer before the softmax (0: none)
    dropout: float = 0.5           # before the classifier
    l2: float = 1e-4               # kernel regularisation of every conv/dense layer
    # Training-only Keras preprocessing layers, from AUGMENTATIONS, or "auto": translate+zoom
    # from AUTO_AUGMENT_MIN_SIZE pixels up (they helped on the 24-32 px glyphs and icons sets
    # and hurt the 8x8 digits: benchmarks/README.md), none below. Flips only on request.
    augment: tuple[str, ...] = ("auto",)
    # How far the augmentation layers move, zoom (fraction of the image) and change contrast
    # (twice this). None: 0.1 and "auto" as above; a number (a tuner's knob) also turns
    # translate+zoom on at any size ("auto"), and 0 turns augmentation off.
    augment_strength: float | None = None
    # Training regime (models/common/regime.py).
    min_steps: int = 1000          # optimizer steps before early stopping may stop (small sets)
    patience_steps: int = 300      # steps without improvement on the held-out part
    holdout_fraction: float = 0.15  # of train, for early stopping (never the eval split)
    class_weights: str = "auto"    # auto: tried when classes are imbalanced, kept if better
    # An RBF kernel head on the CNN's features and the pixels, fitted on all of train
    # (models/cnn/kernel_head.py): auto keeps it unless the softmax head is better on the
    # held-out part by more than a standard error; it lifted the icons and digits, not glyphs.
    kernel_head: str = "auto"
    # Transfer learning (--base-model): the head is trained on the frozen base first; then,
    # with fine_tune, the whole base at learning_rate * fine_tune_lr_factor.
    fine_tune: bool = False
    fine_tune_lr_factor: float = 0.1

    def __post_init__(self):
        unknown = set(self.augment) - set(AUGMENTATIONS) - ({"auto"} if self.augment == ("auto",) else set())
        if unknown:
            raise ValueError(f"Unknown augmentation {sorted(unknown)}; known: {', '.join(AUGMENTATIONS)}")
        if self.class_weights not in CLASS_WEIGHT_MODES:
            raise ValueError(f"class_weights must be one of {CLASS_WEIGHT_MODES}, not {self.class_weights!r}")
        if self.kernel_head not in KERNEL_HEAD_MODES:
            raise ValueError(f"kernel_head must be one of {KERNEL_HEAD_MODES}, not {self.kernel_head!r}")
        if not 0.0 <= self.holdout_fraction < 0.5 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("holdout_fraction must be in [0, 0.5) and dropout in [0, 1)")
        if self.augment_strength is not None and not 0.0 <= self.augment_strength <= 0.5:
            raise ValueError(f"augment_strength must be in [0, 0.5], got {self.augment_strength}")
        if min(self.filters, self.convs_per_block, self.max_blocks) < 1:
            raise ValueError("filters, convs_per_block and max_blocks must be >= 1")

    @classmethod
    def from_family(cls, family: Mapping[str, Any]) -> "CnnHyperparameters":
        """From ``TrainingSettings.family["hparams"]``; unknown names fail loudly."""
        values: dict[str, Any] = dict(family.get("hparams") or {})
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown CNN hyperparameters {sorted(unknown)}; "
                             f"known: {sorted(f.name for f in dataclasses.fields(cls))}")
        if "augment" in values:
            augment = values["augment"]
            values["augment"] = tuple(a for a in (augment.split(",") if isinstance(augment, str)
                                                  else augment) if a)
        return cls(**values)

    def augmentations(self, height: int, width: int) -> tuple[str, ...]:
        """The augmentation layers for images of this size ("auto" resolved)."""
        if self.augment_strength is not None:
            if self.augment_strength <= 0:
                return ()
            return AUTO_AUGMENT if self.augment == ("auto",) else self.augment
        if self.augment == ("auto",):
            return AUTO_AUGMENT if min(height, width) >= AUTO_AUGMENT_MIN_SIZE else ()
        return self.augment

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["augment"] = list(self.augment)
        return values


#: What ``--tune-trials`` searches (models/common/search_space.py): width, depth, dropout,
#: learning rate (a TrainingSettings value: the Trainer applies it) and augmentation
#: strength. Defaults are the untuned values above (learning rate: the family's default).
LEARNING_RATE = "learning_rate"
SCRATCH_SPACE = (
    Knob("filters", "choice", default=16, values=(8, 16, 32)),
    Knob("max_blocks", "int", default=3, low=1, high=3),
    Knob("dropout", "float", default=0.5, low=0.1, high=0.6, step=0.1),
    Knob(LEARNING_RATE, "float", default=1e-3, low=3e-4, high=1e-2, log=True),
    Knob("augment_strength", "choice", default=0.1, values=(0.0, 0.05, 0.1, 0.2)),
)
#: With ``--base-model`` the search also chooses the fine-tuning depth. A TF Hub module is
#: one Keras layer whose variables train together, so the depth is "head only" or "the whole
#: base", at a learning rate this factor below the head's.
FINE_TUNE_SPACE = (
    Knob("fine_tune", "choice", default=False, values=(False, True)),
    Knob("fine_tune_lr_factor", "choice", default=0.1, values=(0.03, 0.1, 0.3)),
)
#: Every knob a hyperparameters file may name (the registry's ``search_space``).
SEARCH_SPACE = SCRATCH_SPACE + FINE_TUNE_SPACE


def search_space(with_base_model: bool) -> tuple[Knob, ...]:
    """What a search explores: the fine-tuning knobs only when there is a base to fine-tune."""
    return SEARCH_SPACE if with_base_model else SCRATCH_SPACE


def with_tuned(hparams: CnnHyperparameters, values: Mapping[str, Any]) -> CnnHyperparameters:
    """``hparams`` with a search's values (the learning rate is not a model setting: left out)."""
    model_values = {k: v for k, v in values.items() if k != LEARNING_RATE}
    known = {f.name for f in dataclasses.fields(CnnHyperparameters)}
    unknown = set(model_values) - known
    if unknown:
        raise ValueError(f"Unknown CNN hyperparameters {sorted(unknown)}; known: {sorted(known)}")
    # KerasTuner hands a boolean choice back as 0/1: the Trainer's settings stay booleans.
    flags = {f.name for f in dataclasses.fields(CnnHyperparameters) if isinstance(f.default, bool)}
    tuned: dict[str, Any] = {k: bool(v) if k in flags else v for k, v in model_values.items()}
    return dataclasses.replace(hparams, **tuned)


def describe(hparams: CnnHyperparameters) -> str:
    """The training log's words for ``hparams``: only what differs from the defaults (the object has 15 fields)."""
    defaults = CnnHyperparameters()
    changed = [f"{field.name}={_short(getattr(hparams, field.name))}" for field in dataclasses.fields(hparams)
               if getattr(hparams, field.name) != getattr(defaults, field.name)]
    return "default hyperparameters" if not changed else "hyperparameters " + ", ".join(changed)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        return "+".join(map(str, value)) or "none"
    return str(value)
