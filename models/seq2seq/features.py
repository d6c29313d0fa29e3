"""Feature names of the seq2seq family: raw keys (the data contract) and transformed keys.

Token ids: 0, 1 and 2 are the reserved padding, start and end tokens (in that order at the
head of the TFT vocabulary), then up to ``vocab_size`` tokens by frequency, then one OOV
id (``vocabulary file size``), so a model's output layer has ``vocabulary file size + 1``
units.
"""
from collections.abc import Mapping
from typing import Any

from data.text_features import CONTEXT, DOCUMENT, EXAMPLE_ID, POSITION, SLICING_FEATURES, SPLIT_FEATURE, TARGET  # noqa: F401
from models.common.signatures import transformed_name

CONTEXT_XF = transformed_name(CONTEXT)                # [batch, context_tokens] int64
DECODER_INPUT_XF = transformed_name("decoder_input")  # [batch, target_tokens]: START, t1..
TARGET_XF = transformed_name(TARGET)                  # [batch, target_tokens]: t1.., END
NEXT_TOKEN_XF = transformed_name("next_token")        # [batch] int64: t1, TFMA's label
# [batch, context_tokens] / [batch, target_tokens] int64: 1 where the token begins a whitespace word (the
# events the eval windows ask for: a next word's first token), 0 elsewhere (inside a word, END, PAD). Only the
# Trainer's count models read them (models/seq2seq/count_reference.py); the network never sees them.
CONTEXT_STARTS_XF = transformed_name("context_word_starts")
TARGET_STARTS_XF = transformed_name("target_word_starts")

VOCABULARY = "tokens"      # TFT vocabulary file name
PAD, START, END = "<pad>", "<s>", "</s>"
RESERVED_TOKENS = (PAD, START, END)
PAD_ID, START_ID, END_ID = 0, 1, 2
NUM_OOV_BUCKETS = 1

# Raw features a serving request does not carry (only the context is needed to predict).
LABEL_KEYS = (TARGET,)

# Transform settings (custom_config keys) and their defaults.
VOCAB_SIZE = "vocab_size"
CONTEXT_TOKENS = "context_tokens"
TARGET_TOKENS = "target_tokens"
TRANSFORM_DEFAULTS: dict[str, int] = {VOCAB_SIZE: 4000, CONTEXT_TOKENS: 32, TARGET_TOKENS: 8}


def transform_settings(custom_config: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The Transform settings from ``custom_config`` (other keys ignored), defaults filled in."""
    config = custom_config or {}
    settings = {}
    for key, default in TRANSFORM_DEFAULTS.items():
        value = config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"custom_config[{key!r}] must be a positive int, got {value!r}")
        settings[key] = value
    return settings
