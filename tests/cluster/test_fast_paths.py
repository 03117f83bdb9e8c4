"""The gateway's and the worker's native POSTs skip FastAPI's router, as sift
serve's do (no processes: plain ASGI calls)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from sift_server.cluster import gateway as gateway_module
from sift_server.cluster import worker as worker_module
from sift_server.cluster.gateway import GatewayNativeRoutes


def _scope(method: str, path: str) -> Scope:
    return {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}


async def _receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class _Inner:
    """The FastAPI app behind the layer: records what reached it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await Response(b"inner")(scope, receive, send)


def _call(app: Any, scope: Scope) -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, _receive, send))
    return sent


def test_gateway_native_posts_bypass_the_router(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []

    async def fake_native(request: Request, model: str, endpoint: str) -> Response:
        seen.append((model, endpoint))
        return Response(b"published")

    monkeypatch.setattr(gateway_module, "_native", fake_native)
    inner = _Inner()
    layer = GatewayNativeRoutes(inner)
    for endpoint in ("encode", "score", "extract"):
        sent = _call(layer, _scope("POST", f"/v1/{endpoint}/org/model-a"))
        assert sent[-1]["body"] == b"published"
    assert seen == [("org/model-a", "encode"), ("org/model-a", "score"), ("org/model-a", "extract")]
    # Anything else goes on to FastAPI (other methods' 405, the OpenAI route, models, health).
    for method, path in (
        ("GET", "/v1/encode/m"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
        ("GET", "/healthz"),
    ):
        assert _call(layer, _scope(method, path))[-1]["body"] == b"inner"
    assert inner.paths == ["/v1/encode/m", "/v1/embeddings", "/v1/models", "/healthz"]


def test_worker_runs_native_posts_through_serve_native(monkeypatch: pytest.MonkeyPatch) -> None:
    handled: list[str] = []

    async def fake_serve_native(scope: Scope, receive: Receive, send: Send, state: Any) -> bool:
        if not scope["path"].startswith("/v1/encode/"):
            return False
        handled.append(scope["path"])
        await Response(b"native", headers={"x-a": "1"})(scope, receive, send)
        return True

    monkeypatch.setattr(worker_module, "serve_native", fake_serve_native)
    inner = _Inner()
    inner.state = type("S", (), {"sift": object()})()  # type: ignore[attr-defined]

    async def run(path: str) -> Any:
        return await worker_module.call_app(inner, path, [], b"{}", ingress=None, deadline=float("inf"))  # type: ignore[arg-type]

    reply = asyncio.run(run("/v1/encode/m"))
    assert (reply.status, reply.body) == (200, b"native") and ("x-a", "1") in reply.headers
    assert asyncio.run(run("/v1/embeddings")).body == b"inner"
    assert handled == ["/v1/encode/m"] and inner.paths == ["/v1/embeddings"]
