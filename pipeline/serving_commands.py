"""``models`` and ``rollback``: what is in a TF Serving model directory, and undoing a push."""
import json
import os

from stackenv.errors import MissingInput, PathError
from stackenv.user_files import UserFileError

from artifacts import model_files, serving_dir, staging
from models.common import references
from pipeline.families import gate_metrics

COUNT_METRIC = "example_count"


def _require_dir(base_dir: str) -> None:
    import tensorflow as tf

    if tf.io.gfile.exists(base_dir) and not tf.io.gfile.isdir(base_dir):
        raise PathError(f"--serving-dir {base_dir} is a file, not a directory. Pass a model base dir such as "
                        "output/serving/cnn (the run summary's 'Pushed:' line, minus the version).", base_dir)
    if not tf.io.gfile.isdir(base_dir):
        raise MissingInput(f"Serving directory {base_dir} does not exist. Pass a model base dir such "
                                "as output/serving/cnn (the run summary's 'Pushed:' line, minus the version).")


def list_models(base_dir: str) -> list[str]:
    """One line per pushed version, newest first; the served one is marked with '*'."""
    _require_dir(base_dir)
    removed = staging.remove_stale_copies(base_dir)  # a push killed before its cleanup; said below
    cleaned = [staging.cleaned_line(base_dir, removed)] if removed else []
    versions = serving_dir.list_versions(base_dir)
    if not versions:
        return [f"No model versions in {base_dir}.", *_ignored_lines(base_dir), *cleaned]
    key_metrics = (*gate_metrics(), COUNT_METRIC)  # every family's gate metric: a dir may hold any
    lines = [f"{'':2}{'version':<12} {'pushed at (UTC)':<26} {'metrics':<60} run"]
    served_problem = None
    for version in reversed(versions):
        version_dir = os.path.join(base_dir, str(version))
        warnings = []
        try:
            info = serving_dir.read_push_info(version_dir)
        except UserFileError as error:
            info, warnings = {}, [f"warning: {error.paragraph}"]
        problem = model_files.version_problem(version_dir)
        if problem:
            warnings.append(f"warning: TF Serving cannot load this version: {problem}.")
            if version == versions[-1]:
                served_problem = problem
        metrics = info.get("metrics", {})
        shown = "  ".join(f"{k}={metrics[k]:.4f}" if k != COUNT_METRIC else f"n={metrics[k]:.0f}"
                          for k in key_metrics if k in metrics)
        marker = "* " if version == versions[-1] else "  "
        lines.append(f"{marker}{version:<12} {info.get('pushed_at', '?'):<26} {shown or '-':<60} "
                     f"{info.get('pipeline_run_id') or '-'}")
        lines.extend(f"{'':16}{warning}" for warning in warnings)
        refs = references.read_references(os.path.join(base_dir, str(version)))
        if refs:  # what the model had to beat, on the same eval split (models/common/references.py)
            lines.append(f"{'':16}references: " + "  ".join(
                f"{name}={value:.4f}" for name, value in refs["references"].items()))
        trained_with = _hyperparameters_line(os.path.join(base_dir, str(version)))
        if trained_with:
            lines.append(f"{'':16}{trained_with}")
    lines.append("* = served (TF Serving's default policy serves the highest version)")
    if served_problem:
        lines.append(f"warning: the served version {versions[-1]} is damaged ({served_problem}): TF Serving "
                     f"keeps serving the version it loaded before, or nothing. Roll back (python -m pipeline "
                     f"rollback --serving-dir {base_dir}) or run the pipeline again to push a new one.")
    lines.extend(_ignored_lines(base_dir))
    return lines + cleaned


def _ignored_lines(base_dir: str, shown: int = 5) -> list[str]:
    """Entries that are not versions: named (a few), so a hand-copied '²' or '007' is not a mystery."""
    ignored = serving_dir.ignored_entries(base_dir)
    if not ignored:
        return []
    lines = [f"Ignored (never served, never a baseline or rollback target): {len(ignored)} entr"
             f"{'y' if len(ignored) == 1 else 'ies'}"]
    lines += [f"  {name!r}: {why}" for name, why in ignored[:shown]]
    if len(ignored) > shown:
        lines.append(f"  ... and {len(ignored) - shown} more")
    return lines


def _hyperparameters_line(version_dir: str) -> str | None:
    """What a version was trained with, from its ``assets.extra/training.json`` (the Trainers write it)."""
    import tensorflow as tf

    path = os.path.join(version_dir, references.ASSETS_EXTRA, "training.json")
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            training = json.loads(handle.read(1024 * 1024))
    except ValueError:
        return f"hyperparameters: unknown ({path} is not valid JSON)"
    if not isinstance(training, dict):
        return None
    tuned = training.get("tuned") or {}
    shown = lambda values: ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"  # noqa: E731
                                     for k, v in sorted(values.items()))
    if tuned:
        return f"hyperparameters (tuned): {shown(tuned)}"
    if "learning_rate" in training:
        return f"hyperparameters: untuned defaults (learning_rate={training['learning_rate']:.4g})"
    return None


def rollback(base_dir: str) -> str:
    _require_dir(base_dir)
    moved = serving_dir.rollback(base_dir)
    return (f"Rolled back {base_dir}: version {moved['from']} -> {moved['to']} is now served "
            f"(moved {moved['from']} to {moved['moved_to']}; rename it back to undo).")
