"""The HTTP shell around the serving core: read the body under its limits, call
``core.serve.handle``, and send its reply or its domain error in the endpoint's
envelope. Pure ASGI (the front door's work-route layer calls it with the scope);
the FastAPI routes wrap the same reply in a Starlette response."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sift_server.api.body import declared_length, read_asgi_body, wait_for_asgi_disconnect
from sift_server.core.endpoints import Endpoint
from sift_server.core.serve import Call, Reply, error_reply, handle
from sift_server.core.state import ServerState
from sift_server.errors import SiftError


def scope_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one, as Starlette reads them)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope["headers"])}


async def answer(state: ServerState, endpoint: Endpoint, model: str, scope: Scope, receive: Receive) -> Reply:
    started = time.perf_counter()
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
        return await handle(state, call)
    except SiftError as error:
        return error_reply(state, endpoint, error)


async def send_reply(send: Send, reply: Reply) -> None:
    raw = [
        (b"content-type", reply.media_type.encode("latin-1")),
        (b"content-length", str(len(reply.body)).encode("latin-1")),
    ]
    raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers.items()]
    await send({"type": "http.response.start", "status": reply.status, "headers": raw})
    await send({"type": "http.response.body", "body": reply.body})


async def respond(request: Request, state: ServerState, endpoint: Endpoint, model: str) -> Response:
    """The same answer as a Starlette response (for the FastAPI routes)."""
    reply = await answer(state, endpoint, model, request.scope, request.receive)
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.media_type)
