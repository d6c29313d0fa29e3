"""Warm start: begin training from an earlier model's weights when they fit the new model.

The pipeline hands the latest blessed model of the same pipeline to the Trainer as TFX's
``base_model`` input (``fn_args.base_model``, its Format-Serving SavedModel). Weights are
only reused when they mean the same thing in the new model, so two checks come first:

- **Identity**: every export records what its weights are tied to in
  ``assets.extra/warm_start.json`` (family, input shape, class or token vocabulary). Equal
  shapes are not enough: ten classes in another order, or another vocabulary of the same
  size, would load without error and start from wrong weights.
- **Shapes**: the SavedModel's variables are restored into an uncompiled clone of the new
  model (so the old optimizer's state is not carried over, only the weights) and every
  weight must be matched; any mismatch falls back to a fresh start.

Either way the decision, with its reason, goes into the new export's ``warm_start.json``,
which the run summary prints. Nothing here knows about TFX or the pipeline.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

WARM_START_FILE = "warm_start.json"
#: Where an export that wraps its trained network in another model (the CNN's kernel head,
#: models/cnn/kernel_head.py) keeps that network in its checkpoint, as a tracked attribute.
TRAINED_NETWORK = "trained_network"
ASSETS_EXTRA = "assets.extra"


@dataclasses.dataclass
class WarmStart:
    """What a Trainer run decided: ``source`` is the base model it started from, or None."""

    requested: bool
    source: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_record(saved_model_dir: str) -> dict[str, Any] | None:
    """The ``warm_start.json`` of an export, or None when it has none (or it is unreadable)."""
    import tensorflow as tf

    path = os.path.join(saved_model_dir, ASSETS_EXTRA, WARM_START_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            return json.load(handle)
    except ValueError:
        return None


def write_record(export_dir: str, identity: dict[str, Any], decision: WarmStart) -> None:
    """Record the export's identity (for later warm starts) and how this one was started."""
    import tensorflow as tf

    folder = os.path.join(export_dir, ASSETS_EXTRA)
    tf.io.gfile.makedirs(folder)
    with tf.io.gfile.GFile(os.path.join(folder, WARM_START_FILE), "w") as handle:
        handle.write(json.dumps({"identity": identity, "warm_start": decision.to_dict()},
                                indent=2, sort_keys=True) + "\n")


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit - 3] + "..."


def identity_mismatch(base: dict[str, Any] | None, identity: dict[str, Any]) -> str | None:
    """Why weights tied to ``base`` cannot seed a model with ``identity``, or None."""
    if base is None:
        return "it records no warm-start identity (exported before warm start existed)"
    if base.get("family") != identity.get("family"):
        return f"it is a {base.get('family')!r} model, this run trains {identity.get('family')!r}"
    for key in sorted(identity):
        if base.get(key) != identity[key]:
            return f"its {key} differs ({_short(base.get(key))} there, {_short(identity[key])} now)"
    return None


def restore_weights(model, donor, saved_model_dir: str) -> None:
    """Copy every weight of ``saved_model_dir`` into ``model`` through ``donor``, or raise.

    ``donor`` is a second, throw-away build of the same model (subclassed models cannot be
    cloned): it reads the SavedModel's variables checkpoint, whose Keras object graph is the
    same for the same architecture, and must match every weight it has. Only the weights are
    copied on, so ``model`` trains with a fresh optimizer (the old one's step count would
    otherwise restart learning-rate schedules at their end).
    """
    import tensorflow as tf

    path = os.path.join(saved_model_dir, "variables", "variables")
    status = None
    try:
        status = donor.load_weights(path)
        status.assert_existing_objects_matched()
    except (ValueError, AssertionError) as at_the_root:
        if status is not None:
            status.expect_partial()  # unmatched values are the reason given, not a warning at exit
        inner = tf.train.Checkpoint(**{TRAINED_NETWORK: donor}).read(path)
        try:
            inner.assert_existing_objects_matched()
        except (ValueError, AssertionError):
            raise at_the_root from None
        finally:
            inner.expect_partial()  # the wrapper's own values (the kernel head) stay behind
    if not donor.weights:
        raise ValueError("the new model has no weights to restore into")
    model.set_weights(donor.get_weights())


class WarmStarter:
    """Applies one warm-start decision to every model a Trainer builds (trials, retries).

    ``build()`` is called once more for the donor the weights are read into, so a failed
    restore leaves the model itself untouched.
    """

    @classmethod
    def for_trainer(cls, requested: bool, fn_args, identity: dict[str, Any], logger) -> WarmStarter:
        """The Trainer's decision maker, fed TFX's ``base_model`` (none without --warm-start)."""
        return cls(requested, getattr(fn_args, "base_model", None), identity, logger.info)

    def __init__(self, requested: bool, base_model_dir: str | None, identity: dict[str, Any],
                 log: Callable[[str], None] = print):
        self.identity = identity
        self.decision = WarmStart(requested=requested)
        self._base = base_model_dir if requested else None
        self._log = log
        if requested and not base_model_dir:
            self._decide(None, "no blessed model of this pipeline yet")

    def _decide(self, source: str | None, note: str) -> None:
        self.decision = WarmStart(requested=True, source=source, note=note)
        if source:
            self._log(f"Warm start: from {source}")
        else:
            self._log(f"Warm start: trained from scratch, {note}")

    def build(self, build: Callable[[], Any]):
        model = build()
        if not self._base:
            return model
        mismatch = identity_mismatch((read_record(self._base) or {}).get("identity"), self.identity)
        if mismatch is None:
            try:
                restore_weights(model, build(), self._base)
            except (ValueError, AssertionError) as error:
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                mismatch = f"its weights do not fit this model ({first[:200]})"
        if mismatch is None:
            if self.decision.source != self._base:
                self._decide(self._base, "weights restored")
            return model
        self._decide(None, f"the latest blessed model does not fit: {mismatch}")
        self._base = None  # decided once: every later build starts fresh too
        return model
