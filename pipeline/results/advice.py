"""What would help a model that was not blessed, read from its own training curves.

Both families record how training went in ``assets.extra/training.json``: the epoch kept on
held-out TRAIN examples, how many ran, and (the text family) the per-epoch curves on the fit
and held-out parts. Two patterns call for opposite remedies, so the advice names the one the
record shows instead of a fixed "train longer":

- overfitting: the held-out score peaked before the last epoch while the fit score went on
  rising (or the gap between them is wide) -> more data, or more regularisation;
- underfitting: the held-out score was still rising at the last epoch -> more epochs, or a
  bigger model.
"""
from typing import Any

#: Fit-minus-held-out gap of the key score above which a model has memorised its train data.
WIDE_GAP = 0.15


def _curve(curves: dict[str, list[float]], *names: str) -> list[float]:
    return next((curves[name] for name in names if curves.get(name)), [])


def diagnosis(training: dict[str, Any] | None) -> str | None:
    """'overfitting: ...', 'underfitting: ...' or None when the record shows neither (or is absent)."""
    if not training or training.get("regime") != "early_stopping":
        return None
    best, ran = training.get("best_epoch"), training.get("epochs_run")
    curves = training.get("curves") or {}
    fit = _curve(curves, "next_token_top5", "accuracy")
    held = _curve(curves, "val_next_token_top5", "val_accuracy")
    gap = (fit[best - 1] - held[best - 1]) if best and len(fit) >= best and len(held) >= best else None
    if best is not None and ran is not None and best < ran:
        rising = len(fit) >= ran and fit[ran - 1] > fit[best - 1]
        if rising or training.get("stopped_early") or (gap is not None and gap > WIDE_GAP):
            held_words = f" (held-out best at epoch {best} of {ran}"
            held_words += f", {gap:.2f} below the train score)" if gap is not None else ")"
            return ("overfitting" + held_words + ": more data helps most (add text or images to --data); "
                    "else more regularisation (a --tune-trials search covers dropout) or a smaller model")
    if best is not None and ran is not None and best == ran and not training.get("stopped_early"):
        return (f"underfitting (the held-out score still rose at the last epoch, {ran}): more epochs "
                "(--epochs) or a bigger model (a --tune-trials search covers the model size)")
    if gap is not None and gap > WIDE_GAP:
        return (f"overfitting (the train score is {gap:.2f} above the held-out one): more data helps most; "
                "else more regularisation or a smaller model")
    return None
