"""The tuning options of a run: checked before anything runs, and a reused search staged.

``--tune-trials N`` adds TFX's Tuner before the Trainer (pipeline/graph.py);
``--hyperparameters FILE`` instead imports the best values of an earlier search (TFX's
Importer) into the Trainer's ``hyperparameters`` input. The file is either a Tuner's
``best_hyperparameters.txt`` (a KerasTuner HyperParameters config; its folder works too) or
a JSON object of values; it is copied into ``<output>/hyperparameters/<content hash>/``
because the Trainer reads the only file of its artifact's folder, and so that the same
content keeps the same URI (a re-run stays cached). Nothing here loads TensorFlow.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from stackenv import user_files
from stackenv.errors import ConfigError

from artifacts.search_record import BEST_FILE
from models.common.search_space import names, values_of
from pipeline.families import FAMILIES, get_family

MAX_TRIALS = 1000
MAX_STEPS = 1_000_000
MAX_BUDGET_MINUTES = 7 * 24 * 60     # a week: anything longer is a typo (seconds? hours?)
DEFAULT_STEPS = 200


def check_options(config: Any) -> None:
    """One paragraph naming the flag for each impossible combination of tuning settings (PipelineConfig calls
    this after the declared ranges and choices are checked: pipeline/config.py)."""
    tuning_flags = {"--tune-steps": config.tune_steps, "--tune-budget": config.tune_budget,
                    "--tune-algorithm": config.tune_algorithm}
    if getattr(config, "tune_workers", 1) > 1:
        tuning_flags["--tune-workers"] = config.tune_workers
    if config.tune_trials is None:
        given = [flag for flag, value in tuning_flags.items() if value is not None]
        if given:
            raise ConfigError(given[0], "only applies to a hyperparameter search, which --tune-trials N turns on; "
                                        "add e.g. --tune-trials 8, or drop the option.")
        return
    family = get_family(config.model)
    if not family.tuning:
        raise ConfigError("--tune-trials", f"model family {family.name!r} has no search space (no tuner_fn in its "
                                           "registration, pipeline/families/); run it without --tune-trials.")
    if config.hyperparameters_file:
        raise ConfigError("--hyperparameters", "reuses a past search instead of searching, so it cannot be combined "
                                               "with --tune-trials; drop one of them.")


def _read(path: str) -> str:
    if "://" in path:
        import tensorflow as tf

        reader = tf.io.gfile
        if reader.isdir(path):
            path = os.path.join(path, BEST_FILE)
        with reader.GFile(path) as handle:
            return handle.read()
    if os.path.isdir(path):
        path = os.path.join(path, BEST_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return user_files.read_user_file(path, flag="--hyperparameters", what="hyperparameters as JSON",
                                     max_bytes=user_files.CONFIG_MAX_BYTES)


def read_hyperparameters(path: str, model: str) -> dict[str, Any]:
    """The parsed file, after checking that it names only this family's knobs."""
    how = (f"Pass a Tuner's {BEST_FILE} (an earlier tuned run's summary prints its path) or a JSON object of "
           "values, e.g. {\"dropout\": 0.3}")
    try:
        content = json.loads(_read(path))
    except user_files.UserFileError as error:
        raise ConfigError("--hyperparameters", error.paragraph.removeprefix("--hyperparameters ") +
                          f" {how}.") from None
    except FileNotFoundError:
        raise ConfigError("--hyperparameters", f"{path} does not exist (or a folder without {BEST_FILE}). "
                                               f"{how}.") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError("--hyperparameters", f"{path} is not a JSON hyperparameters file ({error}). "
                                               f"{how}.") from None
    values = values_of(content) if isinstance(content, dict) else None
    if not values and isinstance(content, dict) and content.get("untuned_defaults"):
        return content  # a search whose untuned defaults won (components/tuner.py): train with the defaults
    if not values:
        raise ConfigError("--hyperparameters", f"{path} holds no hyperparameter values. "
                                               f"{how}.")
    family = get_family(model)
    known = set(names(family.knobs()))
    unknown = sorted(set(values) - known)
    if unknown:
        owners = [other.name for other in FAMILIES.values()
                  if other.name != family.name and other.tuning and set(values) <= set(names(other.knobs()))]
        origin = (f"it is a {owners[0]} hyperparameters file (from a --model {owners[0]} search)" if owners
                  else f"it names {unknown}, which are not {family.name} hyperparameters")
        raise ConfigError("--hyperparameters", f"{path} does not fit --model {family.name}: {origin}. The "
                                               f"{family.name} search space is {sorted(known)}; pass a file from a "
                                               f"--model {family.name} search, or run with --model "
                                               f"{owners[0] if owners else '<its family>'}.")
    return content


def stage_hyperparameters(path: str, model: str, output_dir: str) -> str:
    """Copy the checked file to ``<output>/hyperparameters/<hash>/``; that folder is the Importer's URI."""
    content = json.dumps(read_hyperparameters(path, model), sort_keys=True)
    folder = os.path.join(output_dir, "hyperparameters", hashlib.sha256(content.encode()).hexdigest()[:16])
    if "://" in folder:
        import tensorflow as tf

        tf.io.gfile.makedirs(folder)
        with tf.io.gfile.GFile(os.path.join(folder, BEST_FILE), "w") as handle:
            handle.write(content)
        return folder
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, BEST_FILE)
    if not os.path.exists(target):
        with open(target + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(target + ".tmp", target)
    return folder
