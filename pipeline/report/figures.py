"""Figures of the report tables: matplotlib ``Figure`` objects, no pyplot state.

Built on ``matplotlib.figure.Figure`` directly so that drawing needs no GUI backend and
leaks nothing between figures; ``figure_png`` turns one into bytes for HTML or a notebook.
"""
import io
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

MAX_BARS = 30   # slices in a bar chart; more (e.g. one per document) hide the worst ones


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def plot_slice_metric(frame: pd.DataFrame, metric: str | None = None, feature: str | None = None,
                      title: str | None = None) -> Figure:
    """Horizontal bars of one metric per slice, worst on top in red, overall as a line.

    ``feature`` restricts the bars to that slicing feature; more than ``MAX_BARS``
    slices are cut to the worst ones (ranked as in ``slice_metrics_frame``).
    """
    metric = metric or frame.attrs["key_metric"]
    overall = frame.loc[frame["slice"] == "overall", metric]
    bars = frame[frame["slice"] != "overall"]
    if feature is not None:
        bars = bars[bars["feature"] == feature]
    shown = bars.head(MAX_BARS)
    higher_is_better = frame.attrs.get("higher_is_better", True) if metric == frame.attrs.get("key_metric") else True
    worst_value = shown[metric].min() if higher_is_better else shown[metric].max()
    figure = Figure(figsize=(7, 0.3 * len(shown) + 1.4))
    axes = figure.add_subplot()
    colors = ["#d62728" if value == worst_value else "#4c72b0" for value in shown[metric]]
    axes.barh(range(len(shown)), shown[metric], color=colors)
    axes.set_yticks(range(len(shown)), [short(s) for s in shown["slice"]])
    axes.invert_yaxis()
    subtitle = ""
    if not overall.empty and not math.isnan(overall.iloc[0]):
        axes.axvline(overall.iloc[0], color="black", linestyle="--", linewidth=1)
        subtitle = f"\ndashed: overall {overall.iloc[0]:.4f}"
    for position, value in enumerate(shown[metric]):
        axes.text(value, position, f" {value:.3f}", va="center", fontsize=8)
    if len(shown) and shown[metric].max() > 0:
        axes.set_xlim(0, shown[metric].max() * 1.12)   # room for the value labels
    cut = f" (worst {len(shown)} of {len(bars)})" if len(bars) > len(shown) else ""
    axes.set_title((title or f"{metric} by slice") + cut + subtitle, fontsize=10)
    axes.set_xlabel(metric)
    figure.tight_layout()
    return figure


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def plot_confusion_matrix(matrix: pd.DataFrame, title: str = "Confusion matrix (overall)") -> Figure:
    """Heatmap of ``confusion_matrix_frame``, counts written in the cells when they fit."""
    size = len(matrix)
    figure = Figure(figsize=(max(4.5, 0.45 * size + 2), max(4, 0.45 * size + 1.5)))
    axes = figure.add_subplot()
    image = axes.imshow(matrix.values, cmap="Blues")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    axes.set_xticks(range(size), [short(str(c), 12) for c in matrix.columns], rotation=90)
    axes.set_yticks(range(size), [short(str(c), 12) for c in matrix.index])
    axes.set_xlabel("predicted")
    axes.set_ylabel("actual")
    if size <= 20:
        high = matrix.values.max() or 1
        for (row, column), count in np.ndenumerate(matrix.values):
            if count:
                axes.text(column, row, f"{count:.0f}", ha="center", va="center", fontsize=7,
                          color="white" if count > high / 2 else "black")
    axes.set_title(f"{title}, {matrix.values.sum():.0f} examples")
    figure.tight_layout()
    return figure
