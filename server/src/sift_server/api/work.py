"""The work routes: one raw-ASGI endpoint per entry of the endpoint table
(core/endpoints.py), all answered by one handler, in front of an app that
serves everything else.

``sift serve`` passes the serving core (``core.serve.handle``), ``sift gateway``
a publish to the model's work queue (cluster/gateway.py); both get the same
body path (limit, body timeout, a memory map past 1 MiB: api/body.py), the
same error envelopes and the same 405 for another method.

Like Starlette's ``Router`` with ``Route``s over raw ASGI endpoints and a
``default`` app, with two differences that matter here: the path is matched by
the table's own ``route`` (the one matcher of these paths, which the worker and
the front door use too) rather than a second set of regular expressions, and a
non-HTTP scope (lifespan) goes to the default app, whose lifespan it is. A work
POST thus never enters FastAPI's per-request machinery (its entry, middleware
stack, router and dependency solving: docs/benchmarks/request-cost.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from sift_server.api.body import declared_length, read_asgi_body, wait_for_asgi_disconnect
from sift_server.core.endpoints import ENDPOINTS, Endpoint, route
from sift_server.core.serve import Call, Reply, error_reply
from sift_server.core.state import ServerState
from sift_server.errors import MethodNotAllowed, SiftError

# Answers one request whose body is read; raises SiftError, rendered in the endpoint's envelope.
Handler = Callable[[Call], Awaitable[Reply]]


def scope_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one, as Starlette reads them)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope["headers"])}


async def send_reply(send: Send, reply: Reply) -> None:
    """The reply as ASGI messages: a whole body with its Content-Length, or a
    streamed one chunk by chunk as it is made."""
    body = reply.body
    raw = [(b"content-type", reply.media_type.encode("latin-1"))]
    if isinstance(body, bytes):
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
    raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers.items()]
    await send({"type": "http.response.start", "status": reply.status, "headers": raw})
    if isinstance(body, bytes):
        await send({"type": "http.response.body", "body": body})
        return
    async for chunk in body:
        if chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


class WorkEndpoint:
    """One endpoint of the table as a raw ASGI app: read the body, call the
    handler, send its reply or its error in the endpoint's envelope."""

    def __init__(self, endpoint: Endpoint, handler: Handler, state: ServerState) -> None:
        self.endpoint = endpoint
        self.handler = handler
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            method, path = scope["method"], scope["path"]
            refusal = MethodNotAllowed(f"Method {method} is not allowed on {path}; see the Allow header.")
            reply = error_reply(self.state, self.endpoint, refusal)
            reply.headers["Allow"] = "POST"
            await send_reply(send, reply)
            return
        await send_reply(send, await self.answer(scope, receive))

    async def answer(self, scope: Scope, receive: Receive) -> Reply:
        started = time.perf_counter()
        endpoint, state = self.endpoint, self.state
        model: str = scope["path_params"]["model"]
        headers = scope_headers(scope)
        try:
            body = await read_asgi_body(
                receive,
                state.settings.max_body_bytes,
                declared_length(headers.get("content-length")),
                state.settings.body_timeout_s,
                scope["method"],
                scope["path"],
            )
        except SiftError as error:
            state.metrics.count(model, endpoint.name, error.status)
            return error_reply(state, endpoint, error)
        call = Call(
            endpoint,
            model,
            headers,
            body,
            # Opened by the front door (IngressCount) when the headers arrived.
            ingress=scope.get("sift.ingress"),
            disconnected=lambda: wait_for_asgi_disconnect(receive),
            started=started,
        )
        try:
            return await self.handler(call)
        except SiftError as error:
            return error_reply(state, endpoint, error)


class WorkRoutes:
    """The table's endpoints, each a :class:`WorkEndpoint` with ``handler``;
    every other request (and the lifespan) goes to ``default``."""

    def __init__(self, state: ServerState, handler: Handler, default: ASGIApp) -> None:
        self.endpoints = {e.name: WorkEndpoint(e, handler, state) for e in ENDPOINTS}
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = route(scope["path"])
            if target is not None:
                endpoint, model = target
                scope["path_params"] = {"model": model}
                await self.endpoints[endpoint.name](scope, receive, send)
                return
        await self.default(scope, receive, send)
