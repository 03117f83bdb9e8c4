"""The HTTP shell around the serving core: read the body under its limits, call
``core.serve.handle``, and turn its reply or domain error into a response."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from sift_server.api.body import read_body_buffer, wait_for_disconnect
from sift_server.core.endpoints import Endpoint
from sift_server.core.serve import Call, Reply, error_reply, handle
from sift_server.core.state import ServerState
from sift_server.errors import SiftError


def as_response(reply: Reply) -> Response:
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.media_type)


async def respond(request: Request, state: ServerState, endpoint: Endpoint, model: str) -> Response:
    started = time.perf_counter()
    try:
        body = await read_body_buffer(request, state.settings.max_body_bytes, state.settings.body_timeout_s)
    except SiftError as error:
        state.metrics.count(model, endpoint.name, error.status)
        return as_response(error_reply(state, endpoint, error))
    call = Call(
        endpoint,
        model,
        request.headers,
        body,
        # Opened by the front door (IngressCount) when the headers arrived.
        ingress=request.scope.get("sift.ingress"),
        disconnected=lambda: wait_for_disconnect(request),
        started=started,
    )
    try:
        reply = await handle(state, call)
    except SiftError as error:
        reply = error_reply(state, endpoint, error)
    return as_response(reply)
