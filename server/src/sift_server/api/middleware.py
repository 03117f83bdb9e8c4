"""The HTTP front door: small pure-ASGI layers on the hot path, one job each.

From the outside in (``front_door`` stacks them, once, for ``sift serve`` and
the gateway alike):

* ``DrainGate``: 503 to every new request once a shutdown signal came;
* ``ApiKeyGate``: 401 without the configured bearer key;
* ``BodyLimit``: 413 from the declared Content-Length, before the body is read;
* ``IngressCount``: counts a request for the model its path names the moment
  its headers arrive, before its body is read (the adaptive policy learns from it).

Inside them: the work routes (api/work.py), then FastAPI for the rest.

Health probes pass every layer untouched. A refusal is a domain error
(``sift_server.errors``) rendered by the envelope of the path's API family
(``core.endpoints.envelope_for_path``), like every other error.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from sift_server.core.endpoints import envelope_for_path, route
from sift_server.core.state import ServerState
from sift_server.errors import BodyTooLarge, ShuttingDown, SiftError, Unauthorized
from sift_server.service.common import split_profile

PROBES = frozenset({"/healthz", "/livez", "/readyz"})


def _gated(scope: Scope) -> bool:
    """An HTTP request other than a health probe."""
    return scope["type"] == "http" and scope["path"] not in PROBES


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def send_error(send: Send, path: str, error: SiftError, extra: dict[str, str] | None = None) -> None:
    """``error`` in the envelope of the path's API family (OpenAI or native)."""
    status, body, headers = envelope_for_path(path, error)
    raw = json.dumps(body).encode()
    header_list = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    header_list += [(k.lower().encode(), v.encode()) for k, v in {**headers, **(extra or {})}.items()]
    await send({"type": "http.response.start", "status": status, "headers": header_list})
    await send({"type": "http.response.body", "body": raw})


class DrainGate:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.state.draining and _gated(scope):
            refusal = ShuttingDown("The server is draining after a shutdown signal; retry elsewhere.")
            await send_error(send, scope["path"], refusal)
            return
        await self.app(scope, receive, send)


class ApiKeyGate:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.state.settings.api_key
        if key and _gated(scope) and not self._authorized(scope, key):
            refusal = Unauthorized("Missing or invalid API key: send 'Authorization: Bearer <key>'.")
            await send_error(send, scope["path"], refusal, {"WWW-Authenticate": "Bearer"})
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _authorized(scope: Scope, key: str) -> bool:
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        # Constant time: a key must not leak through how fast a wrong one is refused.
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


class BodyLimit:
    """The declared size only: a body without Content-Length (chunked) is
    bounded while it is read (``api.body``)."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and route(scope["path"]) is not None:
            limit = self.state.settings.max_body_bytes
            declared = _header(scope, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                await send_error(send, scope["path"], BodyTooLarge(f"Request body exceeds the limit of {limit} bytes."))
                return
        await self.app(scope, receive, send)


class IngressCount:
    """Opens the model's ingress ticket (``scope["sift.ingress"]``) when the
    headers arrive; admission ends it, and so does the end of the request."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = route(scope["path"]) if scope["type"] == "http" else None
        if target is None or not target[1]:  # not a work route, or its model is in the body
            await self.app(scope, receive, send)
            return
        ticket = self.state.registry.begin_ingress(split_profile(target[1])[0])
        if ticket is None:
            await self.app(scope, receive, send)
            return
        scope["sift.ingress"] = ticket
        try:
            await self.app(scope, receive, send)
        finally:
            ticket.end()


# Innermost first.
FRONT_DOOR: tuple[type[Any], ...] = (IngressCount, BodyLimit, ApiKeyGate, DrainGate)


def front_door(app: ASGIApp, state: ServerState) -> ASGIApp:
    """``app`` behind the front door's layers."""
    for layer in FRONT_DOOR:
        app = layer(app, state=state)
    return app
