"""Request bodies for encode / score / extract, exactly as API.md §2.1, §3.1 and §4.1 describe.

Unset optional fields are left out. Items may be plain strings (sent as ``{"text": s}``) or
mappings (sent as given, so ``id``, ``images``, ``metadata``... pass straight through).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Item",
    "Items",
    "encode_body",
    "extract_body",
    "is_single",
    "normalize_item",
    "normalize_items",
    "score_body",
]

#: One input: a text, or a mapping with any of the item fields (``id``, ``text``, ``images``...).
Item = str | Mapping[str, Any]
#: One input (single in, single out) or a sequence of them.
Items = Item | Sequence[Item]


def is_single(items: Items) -> bool:
    """A bare string or mapping is one item; anything else is a batch."""
    return isinstance(items, (str, Mapping))


def normalize_item(item: Item) -> dict[str, Any]:
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, Mapping):
        return dict(item)
    raise TypeError(f"an item must be a str or a mapping, got {type(item).__name__}")


def normalize_items(items: Items) -> list[dict[str, Any]]:
    if is_single(items):
        return [normalize_item(items)]  # type: ignore[arg-type]
    if isinstance(items, (bytes, bytearray)) or not isinstance(items, Sequence):
        raise TypeError(f"items must be a str, a mapping, or a sequence of them, got {type(items).__name__}")
    return [normalize_item(item) for item in items]


def _str_list(labels: str | Sequence[str]) -> list[str]:
    return [labels] if isinstance(labels, str) else list(labels)


def _prune(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}


def encode_body(
    items: Items,
    *,
    output_types: Sequence[str] | None = None,
    output_dtype: str | None = None,
    instruction: str | None = None,
    is_query: bool | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"items": [...], "params": {...}}``; ``is_query`` goes into ``params.options``."""
    merged_options = dict(options or {})
    if is_query is not None:
        merged_options["is_query"] = bool(is_query)
    params = _prune(
        {
            "output_types": _str_list(output_types) if output_types is not None else None,
            "instruction": instruction,
            "output_dtype": output_dtype,
            "options": merged_options or None,
        }
    )
    body: dict[str, Any] = {"items": normalize_items(items)}
    if params:
        body["params"] = params
    return body


def score_body(
    query: Item,
    items: Items,
    *,
    instruction: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"query": item, "items": [...], "instruction"?, "options"?}`` (no ``params`` wrapper)."""
    body: dict[str, Any] = {"query": normalize_item(query), "items": normalize_items(items)}
    if instruction is not None:
        body["instruction"] = instruction
    if options:
        body["options"] = dict(options)
    return body


def extract_body(
    items: Items,
    *,
    labels: str | Sequence[str] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    instruction: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"items": [...], "params": {"labels", "output_schema", "instruction", "options"}}``."""
    params = _prune(
        {
            "labels": _str_list(labels) if labels is not None else None,
            "output_schema": dict(output_schema) if output_schema is not None else None,
            "instruction": instruction,
            "options": dict(options) if options else None,
        }
    )
    body: dict[str, Any] = {"items": normalize_items(items)}
    if params:
        body["params"] = params
    return body
