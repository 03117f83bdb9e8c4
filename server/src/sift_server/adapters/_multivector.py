"""What the multivector adapters (ColBERT, the ColPali family, TopK-Embed) share: the late-
interaction score, and each item's vectors gathered from one flat forward over its rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def maxsim(query: torch.Tensor, document: torch.Tensor) -> float:
    """Sum over the query's vectors of the best dot product over the document's (0 for a
    document with no vectors)."""
    if document.shape[0] == 0:
        return 0.0
    return float((query @ document.T).max(dim=1).values.sum())


def joined_per_item(flat: Sequence[torch.Tensor], sizes: Sequence[int]) -> list[torch.Tensor]:
    """Each item's vectors, its ``size`` rows' vectors one after the other, from ``flat``
    (every item's rows in order)."""
    out: list[torch.Tensor] = []
    offset = 0
    for size in sizes:
        group = flat[offset : offset + size]
        offset += size
        out.append(group[0] if len(group) == 1 else torch.cat(list(group)))
    return out
