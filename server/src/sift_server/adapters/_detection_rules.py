"""The plain rules of zero-shot detection as the reference server applies them
(sie-server 0.10.1's ``owlv2`` and ``grounding_dino`` adapters), free of torch:
the prompts built from labels, the option names and their defaults, the
pre-shrink of large images, the wire box and the label a grounded phrase maps to.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sift_server.errors import InvalidInput

# Catalog defaults (the reference catalog's runtime options).
OWLV2_SCORE_THRESHOLD = 0.1
GROUNDING_BOX_THRESHOLD = 0.25
GROUNDING_TEXT_THRESHOLD = 0.25
# When a catalog entry does not say: the reference's fallback side of OWLv2's square.
OWLV2_DEFAULT_SIDE = 1008

_WORD = re.compile(r"\w+")


def owl_queries(labels: Sequence[str]) -> list[str]:
    """OWLv2's text queries: one per label, ``a photo of <label>``, lowercased and stripped."""
    return [f"a photo of {label.lower().strip()}" for label in labels]


def grounding_prompt(labels: Sequence[str], instruction: str | None) -> str:
    """Grounding DINO's one prompt: ``label. label.`` from the labels, else the
    instruction (lowercased, ending with a period); neither is a 400."""
    if labels:
        return " ".join(f"{label.lower().strip()}." for label in labels)
    if instruction and instruction.strip():
        prompt = instruction.strip().lower()
        return prompt if prompt.endswith(".") else prompt + "."
    raise InvalidInput("this model needs labels (params.labels) or an instruction to detect.")


def probability(options: Mapping[str, Any], names: Sequence[str], default: float) -> float:
    """The first of ``names`` the options set (a number in [0, 1]), else ``default``."""
    for name in names:
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidInput(f"Option '{name}' must be a number between 0 and 1.")
        if not 0.0 <= float(value) <= 1.0:
            raise InvalidInput(f"Option '{name}' must be a number between 0 and 1.")
        return float(value)
    return default


def shrunk_size(width: int, height: int, max_side: int | None) -> tuple[int, int] | None:
    """The size an image is first shrunk to (Lanczos, aspect kept) so its longer side
    is ``max_side``; None when it fits. The processor's own resize then does the rest."""
    if max_side is None or max(width, height) <= max_side:
        return None
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def wire_bbox(box: Sequence[float]) -> list[int]:
    """A post-processed ``[x1, y1, x2, y2]`` in pixels as the wire's ``[x, y, w, h]``,
    each truncated toward zero to an integer, as the reference answers."""
    x1, y1, x2, y2 = (float(value) for value in box)
    return [int(x1), int(y1), int(x2 - x1), int(y2 - y1)]


def canonical_label(phrase: str, labels: Sequence[str]) -> str:
    """The caller's label a grounded phrase came from, or the phrase itself.

    Each label scores the share of its words the phrase holds, then how many of
    the phrase's words it explains; the earlier label wins a full tie. The phrase
    is kept when no label shares a word with it (an instruction prompt, or a
    phrase of punctuation and special tokens)."""
    if not labels:
        return phrase
    phrase_words = set(_WORD.findall(phrase.lower()))
    best, best_key = phrase, (0.0, 0)
    for label in labels:
        words = set(_WORD.findall(label.lower()))
        if not words:
            continue
        matched = len(words & phrase_words)
        key = (matched / len(words), matched)
        if key > best_key:
            best, best_key = label, key
    return best


def detected_object(label: str, score: float, box: Sequence[float]) -> dict[str, Any]:
    """One entry of an item's ``objects``."""
    return {"label": label, "score": float(score), "bbox": wire_bbox(box)}
