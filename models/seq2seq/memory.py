"""Whether the count model's fit fits in the memory left, checked before the Trainer reads a window.

The network's memory follows its batch, which the run's pre-check weighs (pipeline/local/memory.py);
the count model's follows the corpus. The Trainer reads every train window into memory and cross-fits
Kneser-Ney models of several orders over them (``baselines.fit_kneser_ney_reference``), so a large
folder on a small machine would otherwise end minutes into the Trainer in the kernel's OOM killer
(``Killed``, no message), after ExampleGen and Transform ran. The data's facts give the number of train
windows before any is read, so the Trainer refuses at once with one paragraph instead.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stackenv.errors import ConfigError
from stackenv.memory import available_bytes, memory_text

#: Growth of the count fit's peak RSS per train window over the bytes of its token ids (int64, context +
#: target tokens): what ``benchmarks/text_count_memory.py`` measured on a real run's windows, rounded up.
#: Like pipeline/local/memory.py's estimates it leaves out the process's fixed memory (TensorFlow, the
#: traced graphs): a corpus refused here cannot fit; one accepted may still need more.
COUNT_FACTOR = 5.0


def count_bytes(train_windows: int, context_tokens: int, target_tokens: int) -> float:
    """What fitting the count model on ``train_windows`` windows needs, beyond the process's own memory."""
    return COUNT_FACTOR * 8 * (context_tokens + target_tokens) * train_windows


def check_count_memory(facts: Mapping[str, Any], context_tokens: int, target_tokens: int,
                       available: tuple[int, str] | None = None) -> None:
    """ConfigError when the train windows the data's ``facts`` count need more than the memory available;
    nothing when the facts do not count them (data prepared by an older version)."""
    windows = int((facts.get("split_counts") or {}).get("train") or 0)
    needed = count_bytes(windows, context_tokens, target_tokens)
    free, source = available or available_bytes()
    if windows and needed > free:
        fits = int(free // count_bytes(1, context_tokens, target_tokens))
        raise ConfigError("--data", (
            f"the text Trainer's count model needs about {memory_text(needed)} for this corpus's {windows:,} train "
            f"windows of {context_tokens}+{target_tokens} tokens, and this machine has {memory_text(free)} available "
            f"({source}), so the Trainer stopped before reading them instead of being killed half-way. About "
            f"{fits:,} windows fit: train on a smaller folder, lower --context-words, or run on a machine with more "
            "memory (models/seq2seq/memory.py)."))
