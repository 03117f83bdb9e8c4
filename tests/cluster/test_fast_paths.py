"""The gateway's native POSTs skip FastAPI's router, as sift serve's do (no
processes: plain ASGI calls). The worker calls the serving core directly
(tests/api/test_core_entry.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from sift_server.cluster import gateway as gateway_module
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
