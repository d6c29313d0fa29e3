"""Model families: the registry (``registry.py``) and the built-in registrations.

A family is its ``models/<family>/`` package plus one ``ModelFamily`` registration; the
built-in ones are ``cnn.py`` and ``seq2seq.py`` here. Another family registers itself with
``register`` (or ``registered`` for a block, as the tests do). The first registered family
is the default ``--model``.
"""
from pipeline.families import cnn, seq2seq  # noqa: F401  (the built-in registrations, in --model order)
from pipeline.families.registry import (  # noqa: F401  (the registry's public names)
    FAMILIES,
    FAMILY_KEY,
    Memory,
    ModelCard,
    ModelFamily,
    NoSettings,
    NoTflite,
    ReportParts,
    Scoring,
    TrainingDefaults,
    Tuning,
    UnknownFamilyError,
    family_names,
    family_of_trainer_properties,
    gate_metrics,
    get_family,
    load_function,
    option,
    register,
    registered,
)

DEFAULT_MODEL = cnn.FAMILY.name
