"""The inputs every arm and the in-process ceiling see: a fixed pool of short,
varied English sentences (8 to 24 words), the same for a given seed."""

from __future__ import annotations

import random

_SUBJECTS = (
    "the server", "a small model", "our team", "the scheduler", "every request", "the new index",
    "a late client", "the nightly job", "this benchmark", "the cache", "a curious reader", "the old pipeline",
)  # fmt: skip
_VERBS = (
    "answers", "batches", "embeds", "ranks", "retries", "measures", "drops", "queues", "compares", "reads",
    "ships", "explains",
)  # fmt: skip
_OBJECTS = (
    "short questions about the weather", "long product descriptions", "support tickets from last week",
    "search queries in several languages", "paragraphs of legal text", "titles of scientific papers",
    "messages that arrive in bursts", "reviews of a cheap coffee machine", "notes from a planning meeting",
    "recipes with too many steps", "error logs of a failing build", "headlines from the morning news",
)  # fmt: skip
_TAILS = (
    "before lunch", "without any delay", "as fast as the hardware allows", "in one single pass",
    "while the disk is busy", "when nobody is watching", "under a strict latency budget",
    "with surprisingly good results", "after a long idle period", "for the third time today",
)  # fmt: skip


def make_texts(count: int = 256, seed: int = 0) -> list[str]:
    """``count`` deterministic sentences."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
        if rng.random() < 0.7:
            words.append(rng.choice(_TAILS))
        if rng.random() < 0.4:
            words += ["and", rng.choice(_VERBS), rng.choice(_OBJECTS)]
        sentence = " ".join(words)
        texts.append(sentence[0].upper() + sentence[1:] + ".")
    return texts
