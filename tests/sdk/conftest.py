"""Fixtures for the SDK tests: a scripted fake server behind httpx.MockTransport and a fake clock.

Nothing here uses the SDK's own codec to build responses, so the tests check the SDK against
the wire contract (API.md) and not against itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from sift_sdk import AsyncSiftClient, RetryPolicy, SiftClient

MAX_REQUESTS = 500
Scripted = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def nd(array: np.ndarray) -> dict[bytes, Any]:
    """The msgpack-numpy nd-map, built by hand from the contract's table (API.md §1.3)."""
    array = np.ascontiguousarray(array)
    return {
        b"nd": True,
        b"type": array.dtype.str,
        b"kind": b"",
        b"shape": list(array.shape),
        b"data": array.tobytes(),
    }


class Wire:
    """Builders for server responses."""

    @staticmethod
    def msgpack(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
        content = msgpack.packb(body, use_bin_type=True)
        all_headers = {"content-type": "application/msgpack", **(headers or {})}
        return httpx.Response(status, content=content, headers=all_headers)

    @staticmethod
    def json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
        all_headers = {"content-type": "application/json", **(headers or {})}
        return httpx.Response(status, content=json.dumps(body).encode(), headers=all_headers)

    @staticmethod
    def error(
        status: int,
        code: str | None,
        message: str = "boom",
        *,
        retry_after: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> httpx.Response:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        detail = {"code": code, "message": message, **(extra or {})}
        return Wire.json({"detail": detail}, status, headers)

    @staticmethod
    def encode(vectors: np.ndarray, ids: list[str | None] | None = None, model: str = "m") -> httpx.Response:
        items = []
        for i, vector in enumerate(vectors):
            item: dict[str, Any] = {
                "dense": {
                    "dims": int(vector.shape[0]),
                    "dtype": "float32",
                    "values": nd(vector),
                }
            }
            if ids is not None and ids[i] is not None:
                item["id"] = ids[i]
            items.append(item)
        timing = {
            "total_ms": 1.5,
            "queue_ms": 0.1,
            "tokenization_ms": 0.2,
            "inference_ms": 1.0,
            "postprocessing_ms": None,
        }
        return Wire.msgpack({"model": model, "items": items, "timing": timing})


class FakeServer:
    """Answers requests from a script, one entry per request; the last entry repeats."""

    def __init__(self) -> None:
        self.script: list[Scripted] = []
        self.requests: list[httpx.Request] = []

    def reply(self, *responses: Scripted) -> FakeServer:
        self.script.extend(responses)
        return self

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) > MAX_REQUESTS:
            raise AssertionError("the client keeps retrying; giving up")
        if not self.script:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        entry = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(entry, Exception):
            raise entry
        if isinstance(entry, httpx.Response):
            return entry
        return entry(request)

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return self.handler(request)

    def body(self, index: int = -1) -> Any:
        """The request body as the server decodes it: ``unpackb(raw=False)`` and no hook."""
        request = self.requests[index]
        assert request.headers["content-type"] == "application/msgpack"
        return msgpack.unpackb(request.content, raw=False)

    @property
    def paths(self) -> list[str]:
        return [request.url.raw_path.decode() for request in self.requests]


class FakeClock:
    """A monotonic clock that only moves when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


BASE = "http://sift.test:8080"
NO_JITTER = RetryPolicy(rand=lambda: 0.0)


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIFT_API_KEY", raising=False)


@pytest.fixture
def wire() -> type[Wire]:
    return Wire


@pytest.fixture
def nd_map() -> Callable[[np.ndarray], dict[bytes, Any]]:
    return nd


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_client(server: FakeServer, clock: FakeClock) -> Iterator[Callable[..., SiftClient]]:
    made: list[SiftClient] = []

    def make(**kwargs: Any) -> SiftClient:
        http = httpx.Client(transport=httpx.MockTransport(server.handler))
        kwargs.setdefault("retry_policy", NO_JITTER)
        client = SiftClient(BASE, http_client=http, sleep=clock.sleep, clock=clock, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., SiftClient]) -> SiftClient:
    return make_client()


@pytest.fixture
def make_async_client(server: FakeServer, clock: FakeClock) -> Callable[..., AsyncSiftClient]:
    def make(**kwargs: Any) -> AsyncSiftClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(server.async_handler))
        kwargs.setdefault("retry_policy", NO_JITTER)
        return AsyncSiftClient(BASE, http_client=http, sleep=clock.async_sleep, clock=clock, **kwargs)

    return make
