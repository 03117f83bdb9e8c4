"""The seam between the batching engine and the model adapters: what a forward
takes. Both sides import it; neither imports the other for it."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Prepared:
    """A request after ``prepare``: per-item token costs, the key that decides
    which requests may share a forward, and adapter-private data."""

    item_costs: list[int]
    compat_key: Hashable
    payload: Any
    input_tokens: int = 0
    # The engine lane the request was submitted to (``lora:<name>`` for a LoRA).
    lane: str | None = None


@dataclass(frozen=True, slots=True)
class Part:
    """Items [start, stop) of one prepared request inside a forward."""

    prepared: Prepared
    start: int
    stop: int


def split_by_parts(values: Sequence[T], parts: Sequence[Part]) -> list[list[T]]:
    """One output per item of the forward, in parts order, cut back into one
    list per part (what ``Adapter.forward`` returns)."""
    out: list[list[T]] = []
    offset = 0
    for part in parts:
        size = part.stop - part.start
        out.append(list(values[offset : offset + size]))
        offset += size
    return out
