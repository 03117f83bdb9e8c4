"""The inputs every arm and the in-process ceiling see, the same for a given seed.

Three workloads:

* ``short``: short, varied English sentences (8 to 24 words);
* ``sentences``: one text of 5 to 40 words per request, nothing longer (the
  spread of user queries and titles, without passages);
* ``mixed``: what users send, one text of 5 to 40 words in most requests and,
  in one request in twenty, a passage near the model's limit (180 to 220
  words, about 240 to 290 word pieces: truncated to 256 by all-MiniLM-L6-v2).
  Under sustained load a batching rule that favours cheap requests starves
  these; a workload of uniform short sentences would never show it.
"""

from __future__ import annotations

import random
from typing import Literal

Workload = Literal["short", "sentences", "mixed"]
WORKLOADS: tuple[Workload, ...] = ("short", "sentences", "mixed")
LONG_SHARE = 0.05

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


def _words(rng: random.Random, count: int) -> list[str]:
    """``count`` words of running text made of the same phrase pool."""
    words: list[str] = []
    while len(words) < count:
        words += [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_TAILS)]
        words = " ".join(words).split()
    return words[:count]


def make_mixed_texts(count: int = 256, seed: int = 0, long_share: float = LONG_SHARE) -> list[str]:
    """``count`` deterministic texts of user-like mixed lengths (see the module doc);
    ``long_share`` of them passages near the model's limit."""
    rng = random.Random(f"mixed:{seed}")
    texts = []
    for _ in range(count):
        length = rng.randint(180, 220) if rng.random() < long_share else rng.randint(5, 40)
        sentence = " ".join(_words(rng, length))
        texts.append(sentence[0].upper() + sentence[1:] + ".")
    return texts


def texts_for(workload: Workload, count: int = 256, seed: int = 0) -> list[str]:
    if workload == "mixed":
        return make_mixed_texts(count, seed)
    if workload == "sentences":
        return make_mixed_texts(count, seed, long_share=0.0)
    return make_texts(count, seed)
