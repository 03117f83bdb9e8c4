"""One :class:`Call` per public method: the HTTP request to make and how to parse its answer.

This is the whole non-IO part of every method; the sync and async clients only execute calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from numpy.typing import NDArray

from . import _request, _response
from ._request import Item, Items
from ._wire import packb
from .errors import MalformedResponseError
from .results import EncodeResponse, ExtractResult, ScoreResult

__all__ = ["Call", "encode", "encode_full", "extract", "model_info", "models", "score"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """An HTTP request plus the parser of its decoded 2xx body."""

    method: Literal["GET", "POST"]
    path: str
    accept: Literal["msgpack", "json"]
    parse: Callable[[Any], T]
    body: bytes | None = None


def _model_path(route: str, model: str) -> str:
    """``/v1/{route}/{model}`` with the model id kept verbatim (``/`` and ``:`` not encoded)."""
    if not isinstance(model, str) or not model.strip("/"):
        raise ValueError("model must be a non-empty model id such as 'BAAI/bge-m3'")
    return f"/v1/{route}/{model.lstrip('/')}"


def encode_full(
    model: str,
    items: Items,
    *,
    output_types: Sequence[str] | None = None,
    output_dtype: str | None = None,
    instruction: str | None = None,
    is_query: bool | None = None,
    options: Mapping[str, Any] | None = None,
) -> Call[EncodeResponse]:
    body = _request.encode_body(
        items,
        output_types=output_types,
        output_dtype=output_dtype,
        instruction=instruction,
        is_query=is_query,
        options=options,
    )
    count = len(body["items"])
    return Call(
        "POST",
        _model_path("encode", model),
        "msgpack",
        lambda raw: _response.parse_encode(raw, count),
        packb(body),
    )


def encode(
    model: str,
    items: Items,
    *,
    output_types: Sequence[str] | None = None,
    output_dtype: str | None = None,
    instruction: str | None = None,
    is_query: bool | None = None,
    options: Mapping[str, Any] | None = None,
) -> Call[NDArray[Any]]:
    if output_types is not None and "dense" not in ([output_types] if isinstance(output_types, str) else output_types):
        raise ValueError("encode() returns dense vectors; use encode_full() for other outputs")
    full = encode_full(
        model,
        items,
        output_types=output_types,
        output_dtype=output_dtype,
        instruction=instruction,
        is_query=is_query,
        options=options,
    )
    single = _request.is_single(items)

    def parse(raw: Any) -> NDArray[Any]:
        matrix = _response.dense_matrix(full.parse(raw))
        return matrix[0] if single else matrix

    return Call(full.method, full.path, full.accept, parse, full.body)


def score(
    model: str,
    query: Item,
    items: Items,
    *,
    instruction: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Call[ScoreResult]:
    body = _request.score_body(query, items, instruction=instruction, options=options)
    return Call("POST", _model_path("score", model), "msgpack", _response.parse_score, packb(body))


def extract(
    model: str,
    items: Items,
    *,
    labels: str | Sequence[str] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    instruction: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Call[ExtractResult | list[ExtractResult]]:
    body = _request.extract_body(
        items, labels=labels, output_schema=output_schema, instruction=instruction, options=options
    )
    count = len(body["items"])
    single = _request.is_single(items)

    def parse(raw: Any) -> ExtractResult | list[ExtractResult]:
        results = _response.parse_extract(raw, count)
        return results[0] if single else results

    return Call("POST", _model_path("extract", model), "msgpack", parse, packb(body))


def models() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/models", "json", _response.parse_models)


def model_info(model: str) -> Call[dict[str, Any]]:
    def parse(raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise MalformedResponseError("Malformed response: model info must be a map")
        return raw

    return Call("GET", _model_path("models", model), "json", parse)
