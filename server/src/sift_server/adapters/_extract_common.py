"""Helpers shared by the extract adapters: label, threshold and flag resolution,
and the per-item output shape of the contract (API.md §4.2)."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from sift_server.adapters.base import ExtractTask, Part, TaskInput
from sift_server.errors import InvalidInput


def text_extract_task(task: TaskInput) -> ExtractTask:
    """``task`` as the extract task of at least one text a text extractor takes, or the 400."""
    if not isinstance(task, ExtractTask):
        raise InvalidInput("this model only supports the extract task")
    if not task.texts:
        raise InvalidInput("extract needs at least one item")
    return task


def resolve_labels(task: ExtractTask) -> tuple[str, ...]:
    """The request's labels (validated and de-duplicated by the service); at least one is required."""
    labels = tuple(task.labels or ())
    if not labels:
        raise InvalidInput("this model needs labels: pass params.labels")
    return labels


def catalog_threshold(options: Mapping[str, Any], fallback: float | None) -> float | None:
    """The catalog entry's ``threshold`` (checked at load: a bad one fails the load)."""
    value = options.get("threshold", fallback)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"catalog option threshold must be a number between 0 and 1, not {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"catalog option threshold must be a number between 0 and 1, not {value!r}")
    return float(value)


def catalog_flag(options: Mapping[str, Any], name: str, fallback: bool) -> bool:
    """A boolean catalog option (checked at load)."""
    value = options.get(name, fallback)
    if not isinstance(value, bool):
        raise ValueError(f"catalog option {name} must be true or false, not {value!r}")
    return value


def option_count(options: Mapping[str, Any], name: str, default: int, limit: int) -> int:
    """A request's count option (``max_new_tokens``, ``num_beams``): an integer from 1
    to ``limit``, else the 400; ``default`` when absent."""
    value = options.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InvalidInput(f"Option '{name}' must be an integer from 1 to {limit}.")
    return value


def reject_options(task: ExtractTask, model_kind: str, **given: object) -> None:
    """400 naming the first option this kind of model has no use for."""
    for name, value in given.items():
        if value is not None and value != ():
            raise InvalidInput(f"Option '{name}' does not apply to {model_kind}.")


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


def forward_by_key(parts: Sequence[Part], run: Callable[[Any, list[str]], list[Any]]) -> list[list[Any]]:
    """One call of ``run`` per compat key, on the group's first payload and the texts
    of all its parts in order; each part gets its own slice of the answers back."""
    outputs: list[list[Any]] = [[] for _ in parts]
    for indices in group_parts(parts).values():
        group = [parts[i] for i in indices]
        texts = [t for p in group for t in p.prepared.payload.texts[p.start : p.stop]]
        items = run(group[0].prepared.payload, texts)
        offset = 0
        for i, part in zip(indices, group, strict=True):
            size = part.stop - part.start
            outputs[i] = items[offset : offset + size]
            offset += size
    return outputs
