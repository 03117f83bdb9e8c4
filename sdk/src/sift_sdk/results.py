"""Result types returned by the clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Classification",
    "DetectedObject",
    "EncodeResponse",
    "EncodedItem",
    "Entity",
    "ExtractResult",
    "ItemError",
    "Relation",
    "ScoreEntry",
    "ScoreResult",
    "SparseVector",
]


class SparseVector(TypedDict):
    """A sparse embedding: ascending int ``indices`` and their float ``values`` (same length)."""

    indices: NDArray[np.integer[Any]]
    values: NDArray[np.floating[Any]]


class EncodedItem(TypedDict, total=False):
    """One encoded item. Only the requested outputs are present; ``id`` only if one was sent.

    ``dense`` is 1-D ``(dims,)`` (``(ceil(dims/8),)`` uint8 for ``binary``), ``multivector`` is
    2-D ``(num_tokens, token_dims)``. Unknown fields the server adds are kept as they are.
    """

    id: str
    dense: NDArray[Any]
    sparse: SparseVector
    multivector: NDArray[Any]


@dataclass(frozen=True)
class EncodeResponse:
    """Everything an encode call returned (see :meth:`SiftClient.encode_full`)."""

    model: str
    items: list[EncodedItem]
    timing: dict[str, float | None] | None = None
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class ScoreEntry:
    """One scored candidate. ``rank`` is 0-based; higher ``score`` means more relevant."""

    item_id: str
    score: float
    rank: int


@dataclass(frozen=True)
class ScoreResult:
    """A rerank result: every candidate, sorted by score, highest first."""

    model: str
    query_id: str | None
    scores: list[ScoreEntry]
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class Entity:
    """A span found by an extraction model. ``start``/``end`` are character offsets (end
    exclusive) or ``None`` for image-based entities; ``bbox`` is ``[x, y, w, h]`` or ``None``."""

    text: str
    label: str
    score: float
    start: int | None = None
    end: int | None = None
    bbox: list[float] | None = None


@dataclass(frozen=True)
class Relation:
    """A relation between two entities (their shape depends on the model)."""

    head: Any
    tail: Any
    relation: str
    score: float


@dataclass(frozen=True)
class Classification:
    """A label assigned to the whole input, with its score."""

    label: str
    score: float


@dataclass(frozen=True)
class DetectedObject:
    """An object detected in an image; ``bbox`` is ``[x, y, w, h]`` in pixels."""

    label: str
    score: float
    bbox: list[float]


@dataclass(frozen=True)
class ItemError:
    """Why the server could not process one item of an extract batch."""

    code: str
    message: str


@dataclass(frozen=True)
class ExtractResult:
    """The extraction output for one input item (``error`` is set if that item failed)."""

    id: str | None
    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    classifications: list[Classification] = field(default_factory=list)
    objects: list[DetectedObject] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    error: ItemError | None = None
