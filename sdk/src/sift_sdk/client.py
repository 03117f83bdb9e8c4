# Generated from async_client.py by sdk/scripts/unasync.py: edit that file, then run
# `python sdk/scripts/unasync.py`. tests/sdk/test_sdk_clients_in_step.py checks it.
"""Synchronous client (httpx.Client)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, overload

import httpx
from numpy.typing import NDArray

from . import _calls
from ._calls import Call
from ._core import DEFAULT_BASE_URL, ClientCore
from ._request import Item, Items
from ._retry import RetryPolicy
from .results import EncodeResponse, ExtractResult, ScoreResult

__all__ = ["SiftClient"]

T = TypeVar("T")


class SiftClient(ClientCore):
    """Blocking client for a Sift (SIE v1 protocol) server.

    Transient server states (model loading, full queue, accelerator OOM, 429, refused
    connections) are retried until ``retry_deadline_s`` has passed; everything else raises a
    :class:`~sift_sdk.errors.SiftError` subclass at once.

    ``api_key`` defaults to the ``SIFT_API_KEY`` environment variable. An ``http_client`` you
    pass in is used as is (its own timeouts apply) and is not closed by :meth:`close`.
    ``retry_policy``, ``sleep`` and ``clock`` tune or replace the backoff machinery (tests).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float | None = 30.0,
        retry_deadline_s: float = 120.0,
        http_client: httpx.Client | None = None,
        *,
        retry_policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout, retry_deadline_s, retry_policy, clock)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(timeout=timeout)
        self._sleep = sleep or time.sleep

    def _execute(self, call: Call[T]) -> T:
        budget = self._new_budget()
        while True:
            try:
                response = self._http.request(**self._request_args(call))
            except httpx.TransportError as exc:
                delay = self._delay_after_transport_error(budget, exc)
            else:
                maybe_delay = self._delay_after_response(budget, response)
                if maybe_delay is None:
                    return self._parse(call, response)
                delay = maybe_delay
            self._sleep(delay)

    def encode(
        self,
        model: str,
        texts_or_items: Items,
        *,
        output_dtype: str | None = None,
        output_types: Sequence[str] | None = None,
        is_query: bool | None = None,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> NDArray[Any]:
        """Dense embeddings: ``(n, dims)`` for a list of inputs, ``(dims,)`` for a single one.

        The dtype is what the server returned (float32 by default; float16, int8, or uint8 for
        ``output_dtype`` ``"float16"``, ``"int8"``, ``"uint8"``/``"binary"``).
        """
        return self._execute(
            _calls.encode(
                model,
                texts_or_items,
                output_types=output_types,
                output_dtype=output_dtype,
                instruction=instruction,
                is_query=is_query,
                options=options,
            )
        )

    def encode_full(
        self,
        model: str,
        texts_or_items: Items,
        *,
        output_dtype: str | None = None,
        output_types: Sequence[str] | None = None,
        is_query: bool | None = None,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EncodeResponse:
        """Every output (dense, sparse, multivector), ids, timing and usage of an encode call."""
        return self._execute(
            _calls.encode_full(
                model,
                texts_or_items,
                output_types=output_types,
                output_dtype=output_dtype,
                instruction=instruction,
                is_query=is_query,
                options=options,
            )
        )

    def score(
        self,
        model: str,
        query: Item,
        items: Items,
        *,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ScoreResult:
        """Rerank ``items`` against ``query``; every candidate comes back, best first."""
        return self._execute(_calls.score(model, query, items, instruction=instruction, options=options))

    @overload
    def extract(  # type: ignore[overload-overlap]
        self,
        model: str,
        items: Item,
        *,
        labels: str | Sequence[str] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ExtractResult: ...

    @overload
    def extract(
        self,
        model: str,
        items: Sequence[Item],
        *,
        labels: str | Sequence[str] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> list[ExtractResult]: ...

    def extract(
        self,
        model: str,
        items: Items,
        *,
        labels: str | Sequence[str] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        instruction: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ExtractResult | list[ExtractResult]:
        """Entities / classifications / structured data; single in, single out."""
        return self._execute(
            _calls.extract(
                model,
                items,
                labels=labels,
                output_schema=output_schema,
                instruction=instruction,
                options=options,
            )
        )

    def models(self) -> list[dict[str, Any]]:
        """Every model the server serves (``GET /v1/models``)."""
        return self._execute(_calls.models())

    def model(self, name: str) -> dict[str, Any]:
        """One model's info (``GET /v1/models/{name}``)."""
        return self._execute(_calls.model_info(name))

    def close(self) -> None:
        """Close the HTTP connection pool (unless it was passed in as ``http_client``)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> SiftClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
