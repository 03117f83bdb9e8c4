"""The load generator's two clients, and the validation of every response.

``sdk`` goes through ``sift_sdk.AsyncSiftClient`` (what users run); ``httpx``
posts MessagePack with httpx directly (no SDK in the path). Both send a unique
``X-Request-ID`` per request (the SDK through an httpx request hook, from a
context variable set by the caller's task), never retry, and check each answer:
HTTP status, echoed request id, item count, vector shape and finite values.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack

from sift_bench.client.answer import (
    ClientKind,
    Outcome,
    Transport,
    check_status,
    decode_encode_response,
    validate_dense,
)
from sift_bench.client.raw import RawTransport
from sift_bench.workload.request import ENCODE_DENSE, RequestSpec, check_answer

# Under uvicorn's 5 s keep-alive: the client drops an idle connection before the
# server does, so no request is ever written into a connection being closed.
KEEPALIVE_EXPIRY_S = 4.0


def _count(results: Any, items: int, what: str) -> str | None:
    if not isinstance(results, list) or len(results) != items:
        got = len(results) if isinstance(results, list) else type(results).__name__
        return f"expected {items} {what}, got {got}"
    return None


def _limits(max_connections: int) -> httpx.Limits:
    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


# Checks an answer whose status and echoed id are right: why it is wrong (None: it is right).
BodyCheck = Callable[[], str | None]


@dataclass(slots=True)
class _Exchange:
    request_id: str
    status: int | None = None
    echoed: str | None = None
    issued: float | None = None


class _HookedClient:
    """An ``httpx.AsyncClient`` whose hooks stamp each request with the id of
    the calling task's exchange, note when the request was handed to the HTTP
    stack, and keep the response's status and echoed id."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dims: int | None,
        *,
        max_connections: int,
        timeout: float,
        http_transport: httpx.AsyncBaseTransport | None = None,
        spec: RequestSpec = ENCODE_DENSE,
        echo_required: bool = True,
    ) -> None:
        self.model = model
        self.echo_required = echo_required
        self.dims = dims
        self.spec = spec
        self.exchange: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar("exchange", default=None)
        self.http = httpx.AsyncClient(
            timeout=timeout,
            limits=_limits(max_connections),
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
            transport=http_transport,
        )
        self._open(base_url.rstrip("/"), timeout)

    def _open(self, base_url: str, timeout: float) -> None:
        """Set up what the subclass sends with."""

    async def _on_request(self, request: httpx.Request) -> None:
        exchange = self.exchange.get()
        if exchange is not None:
            request.headers["X-Request-ID"] = exchange.request_id
            exchange.issued = time.perf_counter()

    async def _on_response(self, response: httpx.Response) -> None:
        exchange = self.exchange.get()
        if exchange is not None:
            exchange.status = response.status_code
            exchange.echoed = response.headers.get("x-request-id")

    async def _request(self, texts: list[str]) -> BodyCheck:
        """Send the request; what checks its answer once status and id are right."""
        raise NotImplementedError

    def _refusal(self) -> str | None:
        """Why the exchange is invalid whatever its answer (None: it is not)."""
        return None

    async def send(self, request_id: str, texts: list[str]) -> Outcome:
        exchange = _Exchange(request_id)
        token = self.exchange.set(exchange)
        try:
            check_body = await self._request(texts)
        except Exception as exc:  # every failure is an invalid response, never a crash
            return Outcome(False, exchange.status, f"{type(exc).__name__}: {exc}", exchange.issued)
        finally:
            self.exchange.reset(token)
        echoed = exchange.echoed if self.echo_required else request_id
        error = self._refusal() or check_status(exchange.status, echoed, request_id)
        if error is None:
            try:
                error = check_body()
            except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
                error = f"malformed response: {type(exc).__name__}: {exc}"
        return Outcome(error is None, exchange.status, error, exchange.issued)

    async def aclose(self) -> None:
        await self.http.aclose()


class SdkTransport(_HookedClient):
    """``AsyncSiftClient`` on our hooked httpx client (no retries)."""

    kind = "sdk"

    def _open(self, base_url: str, timeout: float) -> None:
        from sift_sdk import AsyncSiftClient

        self._client = AsyncSiftClient(base_url, timeout=timeout, retry_deadline_s=0.0, http_client=self.http)

    async def _request(self, texts: list[str]) -> BodyCheck:
        """Run the primitive through the SDK (it decodes the answer)."""
        error = await self._call(texts)
        return lambda: error

    async def _call(self, texts: list[str]) -> str | None:
        """Why the SDK's answer is wrong (None: it is right)."""
        spec = self.spec
        if spec.primitive == "score":
            result = await self._client.score(self.model, spec.query, texts)
            return _count(result.scores, len(texts), "scores")
        if spec.primitive == "extract":
            results = await self._client.extract(self.model, texts, labels=list(spec.labels))
            return _count(results, len(texts), "extract results")
        if spec.dense_only:
            return validate_dense(await self._client.encode(self.model, texts), len(texts), self.dims)
        response = await self._client.encode_full(self.model, texts, output_types=list(spec.output_types))
        error = _count(response.items, len(texts), "encoded items")
        for output in spec.output_types:
            if error is None and not all(item.get(output) is not None for item in response.items):
                error = f"an item lacks its {output} output"
        return error

    def _refusal(self) -> str | None:
        retries = self._client.last_retry_count
        return f"retried {retries} times" if retries else None

    async def aclose(self) -> None:
        await self._client.aclose()
        await super().aclose()


class HttpxTransport(_HookedClient):
    """MessagePack over a bare ``httpx.AsyncClient``."""

    kind = "httpx"

    def _open(self, base_url: str, timeout: float) -> None:
        self._url = f"{base_url}/v1/{self.spec.route}/{self.model}"

    def _check_body(self, content: bytes, items: int) -> str | None:
        if self.spec.dense_only:
            return validate_dense(decode_encode_response(content, items), items, self.dims)
        return check_answer(self.spec, msgpack.unpackb(content, raw=False, strict_map_key=False), items)

    async def _request(self, texts: list[str]) -> BodyCheck:
        body = msgpack.packb(self.spec.body(texts), use_bin_type=True)
        headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
        response = await self.http.post(self._url, content=body, headers=headers)
        return lambda: self._check_body(response.content, len(texts))


def sdk_available() -> bool:
    try:
        import sift_sdk  # noqa: F401
    except ImportError:
        return False
    return True


def make_transport(
    kind: ClientKind,
    base_url: str,
    model: str,
    dims: int | None,
    *,
    max_connections: int = 64,
    timeout: float = 120.0,
    spec: RequestSpec = ENCODE_DENSE,
    echo_required: bool = True,
) -> Transport:
    """``echo_required``: an answer must echo the request's X-Request-ID."""
    if kind == "raw":
        return RawTransport(base_url, model, dims, max_connections=max_connections, timeout=timeout, spec=spec,
                            echo_required=echo_required)  # fmt: skip
    cls = SdkTransport if kind == "sdk" else HttpxTransport
    return cls(base_url, model, dims, max_connections=max_connections, timeout=timeout, spec=spec,
               echo_required=echo_required)  # fmt: skip


def fetch_dims(base_url: str, model: str, timeout: float = 10.0) -> int | None:
    """The model's dense dimension as the server reports it (None if unknown)."""
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/v1/models/{model}", timeout=timeout)
        response.raise_for_status()
        dims = response.json().get("dims", {}).get("dense")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return int(dims) if isinstance(dims, int) and dims > 0 else None


def fetch_runtime(base_url: str, model: str, timeout: float = 10.0) -> str | None:
    """What runs the model's forward as the server reports it, e.g. ``openvino fp32``
    (None if unknown: an older server, or the reference)."""
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/v1/models/{model}", timeout=timeout)
        response.raise_for_status()
        runtime = response.json().get("runtime") or {}
        return f"{runtime['backend']} {runtime.get('precision')}"
    except (httpx.HTTPError, ValueError, AttributeError, KeyError, TypeError):
        return None
