"""What would help a model that was not blessed, read from its own training curves.

Both families record how training went in ``assets.extra/training.json``: the epoch kept on
held-out TRAIN examples, how many ran, and the per-epoch curves on the fit and held-out parts
(Keras' History: the text family's next-token top-5, the image family's accuracy, and both
losses). Two patterns call for opposite remedies, so the advice names the one the record
shows instead of a fixed "train longer":

- overfitting: the held-out score peaked before the last epoch while the fit score went on
  rising (or the gap between them is wide), or the held-out loss turned up while the fit
  loss kept falling -> more data, or more regularisation;
- underfitting: the held-out score was still rising at the last epoch, or the held-out loss
  still falling -> more epochs, or a bigger model.
"""
import math
from typing import Any

#: Fit-minus-held-out gap of the key score above which a model has memorised its train data.
WIDE_GAP = 0.15
#: Held-out loss this much above its minimum (relative) at the last epoch: it has turned up.
LOSS_TURNED_UP = 0.05

_OVERFITTING = ("more data helps most (add text or images to --data); else more regularisation "
                "(a --tune-trials search covers dropout) or a smaller model")
_BIGGER = "or a bigger model (a --tune-trials search covers the model size)"


class _Clock:
    """Checks named as the training line names them (pipeline/results/gate_summary.py: "kept step N of M"):
    a Keras epoch is one held-out check of ``steps_per_epoch`` steps (models/common/regime.py). A record
    without it (written before checks had a step count) is read in epochs."""

    def __init__(self, training: dict[str, Any]):
        self.every = training.get("steps_per_epoch")
        self.ran = training.get("steps_run")  # the steps done when a time budget cut the last check short

    def count(self, check: int) -> int:
        return min(check * self.every, self.ran or math.inf) if self.every else check

    def at(self, check: int) -> str:
        return f"{'step' if self.every else 'epoch'} {self.count(check)}"

    def last(self, ran: int) -> str:
        return f"the last check, step {self.count(ran)}" if self.every else f"the last epoch, {ran}"

    def underfitting(self, ran: int) -> str:
        """Train longer: with the defaults the step budget grows with the square root of the data, so
        --epochs alone may not move it; --train-steps sets it."""
        if not self.every:
            return f"more epochs (--epochs) {_BIGGER}"
        steps = self.count(ran)
        return f"train longer (--train-steps {2 * steps}; this run's budget was {steps} steps) {_BIGGER}"


def _curve(curves: dict[str, list[float]], *names: str) -> list[float]:
    return next((curves[name] for name in names if curves.get(name)), [])


def diagnosis(training: dict[str, Any] | None) -> str | None:
    """'overfitting: ...', 'underfitting: ...' or None when the record shows neither (or is absent)."""
    if not training or training.get("regime") != "early_stopping":
        return None
    best, ran = training.get("best_epoch"), training.get("epochs_run")
    clock = _Clock(training)
    curves = training.get("curves") or {}
    fit = _curve(curves, "next_token_top5", "accuracy")
    held = _curve(curves, "val_next_token_top5", "val_accuracy")
    gap = (fit[best - 1] - held[best - 1]) if best and len(fit) >= best and len(held) >= best else None
    if best is not None and ran is not None and best < ran:
        rising = len(fit) >= ran and fit[ran - 1] > fit[best - 1]
        if rising or training.get("stopped_early") or (gap is not None and gap > WIDE_GAP):
            held_words = f" (held-out best at {clock.at(best)} of {clock.count(ran)}"
            held_words += f", {gap:.2f} below the train score)" if gap is not None else ")"
            return "overfitting" + held_words + ": " + _OVERFITTING
    if best is not None and ran is not None and best == ran and not training.get("stopped_early") and ran > 1:
        return f"underfitting (the held-out score still rose at {clock.last(ran)}): {clock.underfitting(ran)}"
    if gap is not None and gap > WIDE_GAP:
        return f"overfitting (the train score is {gap:.2f} above the held-out one): {_OVERFITTING}"
    return _from_losses(curves.get("loss") or [], curves.get("val_loss") or [], clock)


def _from_losses(fit: list[float], held: list[float], clock: _Clock) -> str | None:
    """The same two patterns read from the losses, when the scores showed neither."""
    if len(held) < 2 or len(fit) != len(held):
        return None
    low = min(range(len(held)), key=held.__getitem__)
    if low < len(held) - 1 and held[-1] > held[low] * (1 + LOSS_TURNED_UP) and fit[-1] < fit[low]:
        return (f"overfitting (the held-out loss was lowest at {clock.at(low + 1)} of "
                f"{clock.count(len(held))}, {held[low]:.3f}, "
                f"and rose to {held[-1]:.3f} while the train loss kept falling): {_OVERFITTING}")
    if low == len(held) - 1 and held[-1] < held[-2]:
        return (f"underfitting (the held-out loss still fell at {clock.last(len(held))}: "
                f"{held[-2]:.3f} -> {held[-1]:.3f}): {clock.underfitting(len(held))}")
    return None
