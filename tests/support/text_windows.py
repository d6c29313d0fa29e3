"""Windows cut from token lists as data/text.py cuts documents and the Transform pads them (the seq2seq
Trainer's input), for tests of the train text's rebuild, the held-out blocks and cross-fitting."""
import numpy as np


def windows(words: list[list[int]], context_words=16, target_words=4, stride=2, context_tokens=32,
            target_tokens=8) -> tuple[np.ndarray, np.ndarray]:
    """The last ``context_tokens`` ids of ``context_words`` words, then the next ``target_words`` words' ids
    with END, right-padded (``words``: each word's token ids)."""
    contexts, targets = [], []
    for start in range(0, len(words) - context_words - target_words + 1, stride):
        context = [t for word in words[start:start + context_words] for t in word][-context_tokens:]
        target = ([t for word in words[start + context_words:start + context_words + target_words]
                   for t in word] + [2])[:target_tokens]
        contexts.append(context + [0] * (context_tokens - len(context)))
        targets.append(target + [0] * (target_tokens - len(target)))
    return np.array(contexts), np.array(targets)
