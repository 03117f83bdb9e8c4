"""Turn decoded response bodies into result objects (API.md §2.2, §3.2, §4.2).

Every function raises :class:`MalformedResponseError` when a body breaks the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from .errors import MalformedResponseError
from .results import (
    Classification,
    DetectedObject,
    EncodedItem,
    EncodeResponse,
    Entity,
    ExtractResult,
    ItemError,
    Relation,
    ScoreEntry,
    ScoreResult,
    SparseVector,
)

__all__ = ["dense_matrix", "parse_encode", "parse_extract", "parse_models", "parse_score"]

T = TypeVar("T")

#: numpy dtype for each ``dtype`` label, used when arrays arrive as JSON lists.
_LABEL_DTYPES: dict[str, Any] = {
    "float32": np.float32,
    "float16": np.float16,
    "int8": np.int8,
    "uint8": np.uint8,
    "binary": np.uint8,
    "ubinary": np.uint8,
}


def _fail(what: str) -> MalformedResponseError:
    return MalformedResponseError(f"Malformed response: {what}")


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(f"{what} must be a map, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(f"{what} must be a list, got {type(value).__name__}")
    return value


def _field(obj: Mapping[str, Any], key: str, kind: type[T] | tuple[type, ...], what: str) -> T:
    if key not in obj:
        raise _fail(f"{what} lacks {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _fail(f"{what}.{key} has type {type(value).__name__}")
    return value  # type: ignore[return-value]


def _number(obj: Mapping[str, Any], key: str, what: str) -> float:
    return float(_field(obj, key, (int, float, np.number), what))


def _optional_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _array(value: Any, dtype_label: Any, what: str) -> NDArray[Any]:
    """An nd-map already decoded by the codec, or a JSON list converted with the dtype label."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list):
        dtype = _LABEL_DTYPES.get(dtype_label) if isinstance(dtype_label, str) else None
        try:
            return np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise _fail(f"{what} is not a numeric array") from exc
    raise _fail(f"{what} must be an array, got {type(value).__name__}")


def _encoded_item(raw: Any, index: int) -> EncodedItem:
    where = f"items[{index}]"
    item: dict[str, Any] = dict(_mapping(raw, where))
    dense = item.get("dense")
    if dense is not None:
        dense = _mapping(dense, f"{where}.dense")
        item["dense"] = _array(dense.get("values"), dense.get("dtype"), f"{where}.dense.values")
    sparse = item.get("sparse")
    if sparse is not None:
        sparse = _mapping(sparse, f"{where}.sparse")
        item["sparse"] = SparseVector(
            indices=_array(sparse.get("indices"), "int32", f"{where}.sparse.indices"),
            values=_array(sparse.get("values"), sparse.get("dtype"), f"{where}.sparse.values"),
        )
    multi = item.get("multivector")
    if multi is not None:
        multi = _mapping(multi, f"{where}.multivector")
        values = _array(multi.get("values"), multi.get("dtype"), f"{where}.multivector.values")
        if values.ndim != 2:
            raise _fail(f"{where}.multivector.values must be 2-D, got shape {values.shape}")
        item["multivector"] = values
    for key in ("dense", "sparse", "multivector", "id"):
        if key in item and item[key] is None:
            del item[key]
    return item  # type: ignore[return-value]


def _items(body: Mapping[str, Any], expected: int, kind: str) -> list[Any]:
    items = _list(body.get("items"), f"{kind} response 'items'")
    if len(items) != expected:
        raise _fail(f"{kind} returned {len(items)} items for {expected} inputs")
    return items


def parse_encode(body: Any, expected: int) -> EncodeResponse:
    body = _mapping(body, "encode response")
    items = _items(body, expected, "encode")
    timing = body.get("timing")
    usage = body.get("usage")
    return EncodeResponse(
        model=str(body.get("model", "")),
        items=[_encoded_item(raw, i) for i, raw in enumerate(items)],
        timing=dict(timing) if isinstance(timing, Mapping) else None,
        usage=dict(usage) if isinstance(usage, Mapping) else None,
    )


def dense_matrix(response: EncodeResponse) -> NDArray[Any]:
    """Stack the dense vectors into ``(n, dims)`` in input order."""
    vectors = []
    for index, item in enumerate(response.items):
        if "dense" not in item:
            raise _fail(f"items[{index}] has no dense vector")
        vectors.append(item["dense"])
    if not vectors:
        return np.empty((0, 0), dtype=np.float32)
    if any(v.ndim != 1 for v in vectors) or len({v.shape for v in vectors}) != 1:
        raise _fail("dense vectors are not 1-D arrays of one length")
    if len({v.dtype for v in vectors}) != 1:
        raise _fail("dense vectors have different dtypes")
    return np.stack(vectors)


def parse_score(body: Any) -> ScoreResult:
    body = _mapping(body, "score response")
    scores = []
    for index, raw in enumerate(_list(body.get("scores"), "score response 'scores'")):
        where = f"scores[{index}]"
        entry = _mapping(raw, where)
        scores.append(
            ScoreEntry(
                item_id=_field(entry, "item_id", str, where),
                score=_number(entry, "score", where),
                rank=int(_field(entry, "rank", (int, np.integer), where)),
            )
        )
    query_id = body.get("query_id")
    usage = body.get("usage")
    return ScoreResult(
        model=_field(body, "model", str, "score response"),
        query_id=query_id if isinstance(query_id, str) else None,
        scores=scores,
        usage=dict(usage) if isinstance(usage, Mapping) else None,
    )


def _entity(raw: Any, where: str) -> Entity:
    e = _mapping(raw, where)
    bbox = e.get("bbox")
    return Entity(
        text=_field(e, "text", str, where),
        label=_field(e, "label", str, where),
        score=_number(e, "score", where),
        start=_optional_int(e.get("start")),
        end=_optional_int(e.get("end")),
        bbox=[float(v) for v in bbox] if isinstance(bbox, (list, tuple)) else None,
    )


def _relation(raw: Any, where: str) -> Relation:
    r = _mapping(raw, where)
    for key in ("head", "tail"):
        if key not in r:
            raise _fail(f"{where} lacks {key!r}")
    return Relation(
        head=r["head"],
        tail=r["tail"],
        relation=_field(r, "relation", str, where),
        score=_number(r, "score", where),
    )


def _classification(raw: Any, where: str) -> Classification:
    c = _mapping(raw, where)
    return Classification(label=_field(c, "label", str, where), score=_number(c, "score", where))


def _object(raw: Any, where: str) -> DetectedObject:
    o = _mapping(raw, where)
    bbox: list[Any] | tuple[Any, ...] = _field(o, "bbox", (list, tuple), where)
    return DetectedObject(
        label=_field(o, "label", str, where),
        score=_number(o, "score", where),
        bbox=[float(v) for v in bbox],
    )


def _each(raw: Mapping[str, Any], key: str, where: str, parse: Callable[[Any, str], T]) -> list[T]:
    values = raw.get(key)
    if values is None:
        return []
    return [parse(v, f"{where}.{key}[{i}]") for i, v in enumerate(_list(values, f"{where}.{key}"))]


def _item_error(value: Any) -> ItemError | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        code, message = value.get("code"), value.get("message")
        if isinstance(code, str) and code and isinstance(message, str) and message:
            return ItemError(code=code, message=message)
    return ItemError(code="INTERNAL_ERROR", message="Malformed extraction item error")


def _extract_item(raw: Any, index: int) -> ExtractResult:
    where = f"items[{index}]"
    item = _mapping(raw, where)
    item_id = item.get("id")
    data = item.get("data")
    return ExtractResult(
        id=item_id if isinstance(item_id, str) else None,
        entities=_each(item, "entities", where, _entity),
        relations=_each(item, "relations", where, _relation),
        classifications=_each(item, "classifications", where, _classification),
        objects=_each(item, "objects", where, _object),
        data=dict(data) if isinstance(data, Mapping) else {},
        error=_item_error(item.get("error")),
    )


def parse_extract(body: Any, expected: int) -> list[ExtractResult]:
    body = _mapping(body, "extract response")
    return [_extract_item(raw, i) for i, raw in enumerate(_items(body, expected, "extract"))]


def parse_models(body: Any) -> list[dict[str, Any]]:
    body = _mapping(body, "models response")
    models = _list(body.get("models"), "models response 'models'")
    return [dict(_mapping(m, f"models[{i}]")) for i, m in enumerate(models)]
