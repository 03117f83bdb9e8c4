"""Helpers shared by the extract adapters: label, threshold and flag resolution,
and the per-item output shape of the contract (API.md §4.2)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from sift_server.adapters.base import ExtractTask, Part
from sift_server.errors import InvalidInput

DEFAULT_THRESHOLD = 0.5


def resolve_labels(task: ExtractTask) -> tuple[str, ...]:
    """The request's labels, de-duplicated in order; at least one is required."""
    labels = list(task.labels or ())
    if not labels:
        raise InvalidInput("this model needs labels: pass params.labels")
    for label in labels:
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput("labels must be non-empty strings")
    return tuple(dict.fromkeys(labels))


def resolve_threshold(task: ExtractTask, defaults: Mapping[str, Any]) -> float:
    """Request field, then request options, then the catalog options, then 0.5."""
    value = task.threshold
    if value is None:
        value = task.options.get("threshold", defaults.get("threshold", DEFAULT_THRESHOLD))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput("threshold must be a number between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise InvalidInput("threshold must be a number between 0 and 1")
    return float(value)


def resolve_flag(
    name: str, field_value: bool | None, task: ExtractTask, defaults: Mapping[str, Any], fallback: bool
) -> bool:
    """A boolean setting: request field, request options, catalog options, fallback."""
    value: object = field_value
    if value is None:
        value = task.options.get(name, defaults.get(name, fallback))
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false")
    return value


def extract_item(
    entities: list[dict[str, Any]] | None = None,
    classifications: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One extract result in the wire shape (API.md §4.2), lists always present."""
    return {
        "entities": entities or [],
        "relations": [],
        "classifications": classifications or [],
        "objects": [],
        "data": {},
    }


def group_parts(parts: Sequence[Part]) -> dict[Hashable, list[int]]:
    """Indices of parts per compat key. The engine only fuses equal keys; grouping
    anyway keeps a forward correct (one library call per key) if it ever did not."""
    groups: dict[Hashable, list[int]] = {}
    for index, part in enumerate(parts):
        groups.setdefault(part.prepared.compat_key, []).append(index)
    return groups
