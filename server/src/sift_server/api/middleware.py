"""Pure ASGI middleware on the hot path: drain gate, API key, declared body
size, the ingress count (a request is counted the moment its headers arrive,
before its body is read), and the native POST routes answered directly
(``api.native.serve_native``) rather than through FastAPI's router."""

from __future__ import annotations

import hmac
import json
import time
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from sift_server.api.errors import OPENAI_PATH, envelope_for_path
from sift_server.api.native import serve_native
from sift_server.api.state import ServerState
from sift_server.errors import BodyTooLarge, ShuttingDown, SiftError, Unauthorized
from sift_server.service.common import split_profile

PROBES = frozenset({"/healthz", "/livez", "/readyz"})
_NATIVE_PREFIXES = ("/v1/encode/", "/v1/score/", "/v1/extract/")


async def _send_error(send: Send, path: str, error: SiftError, extra: dict[str, str] | None = None) -> None:
    """The error in the envelope of the path's API family (OpenAI or native)."""
    status, body, headers = envelope_for_path(path, error)
    await _send_json(send, status, body, {**headers, **(extra or {})})


async def _send_json(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    header_list = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    header_list += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": header_list})
    await send({"type": "http.response.body", "body": raw})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class SiftMiddleware:
    """``answer_native``: answer the native POST routes here from ``state``'s
    registry (``sift serve``). Off where the app's native routes do something
    else (the cluster gateway forwards them to workers)."""

    def __init__(self, app: ASGIApp, state: ServerState, *, answer_native: bool = False) -> None:
        self.app = app
        self.state = state
        self.answer_native = answer_native

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path in PROBES:
            await self.app(scope, receive, send)
            return
        state = self.state
        if state.draining:
            await _send_error(
                send, path, ShuttingDown("The server is draining after a shutdown signal; retry elsewhere.")
            )
            return
        if state.settings.api_key and not self._authorized(scope):
            refusal = Unauthorized("Missing or invalid API key: send 'Authorization: Bearer <key>'.")
            await _send_error(send, path, refusal, {"WWW-Authenticate": "Bearer"})
            return
        native = path.startswith(_NATIVE_PREFIXES)
        if native or path == OPENAI_PATH:
            declared = _header(scope, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > state.settings.max_body_bytes:
                error = BodyTooLarge(f"Request body exceeds the limit of {state.settings.max_body_bytes} bytes.")
                await _send_error(send, path, error)
                return
        if native:
            ticket = self._ingress(path)
            if ticket is not None:
                scope["sift.ingress"] = ticket
            try:
                if not (self.answer_native and await serve_native(scope, receive, send, state)):
                    await self.app(scope, receive, send)
            finally:
                if ticket is not None:
                    ticket.end()
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        value = _header(scope, b"authorization") or ""
        scheme, _, token = value.partition(" ")
        key = self.state.settings.api_key or ""
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())

    def _ingress(self, path: str) -> Any:
        model = path.split("/", 3)[3] if path.count("/") >= 3 else ""
        name, _ = split_profile(model)
        record = self.state.registry.records.get(name)
        if record is None or record.worker is None:
            return None
        return record.worker.ingress.begin(time.perf_counter())
