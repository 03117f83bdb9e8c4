"""The SIE v1 native routes: encode, score, extract."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sift_server import WIRE_COMPAT_VERSION
from sift_server.api.body import read_body_buffer, wait_for_disconnect
from sift_server.api.errors import native_error
from sift_server.api.state import ServerState
from sift_server.errors import SiftError
from sift_server.registry.registry import Registry
from sift_server.service.common import Limits
from sift_server.service.encode import encode
from sift_server.service.extract import extract
from sift_server.service.run import Outcome, RequestContext
from sift_server.service.score import score
from sift_server.wire.negotiation import JSON_TYPE, MSGPACK_TYPE, request_format, response_format
from sift_server.wire.schemas import EncodeBody, ExtractBody, Item, ScoreBody
from sift_server.wire.sliced import decode_sliced, encode_sliced

router = APIRouter()

Service = Callable[[Registry, str, Any, Limits, RequestContext], Awaitable[Outcome]]


_id_prefix = secrets.token_hex(8)
_id_counter = itertools.count()


def new_request_id() -> str:
    """32 lowercase hex, unique per process (a random prefix and a counter): as
    unique as a UUID here, without reading the kernel's random source per request."""
    return f"{_id_prefix}{next(_id_counter) & 0xFFFFFFFFFFFFFFFF:016x}"


def request_id_of(request: Request) -> str:
    """The client's X-Request-ID when it is short and printable, else a new one."""
    given = request.headers.get("x-request-id")
    if given and len(given) <= 128 and given.isprintable():
        return given
    return new_request_id()


def _context(request: Request, started: float) -> RequestContext:
    request_id = request_id_of(request)
    return RequestContext(
        request_id=request_id,
        started=started,
        ingress=request.scope.get("sift.ingress"),
        disconnected=lambda: wait_for_disconnect(request),
    )


# The native endpoints by path prefix: (endpoint, body schema, service).
ENDPOINTS: dict[str, tuple[str, type[Any], Service]] = {
    "/v1/encode/": ("encode", EncodeBody, encode),
    "/v1/score/": ("score", ScoreBody, score),
    "/v1/extract/": ("extract", ExtractBody, extract),
}


def endpoint_of(path: str) -> tuple[str, str, type[Any], Service] | None:
    """The native endpoint a path addresses and its model (the rest of the path)."""
    for prefix, (endpoint, schema, service) in ENDPOINTS.items():
        if path.startswith(prefix):
            return path[len(prefix) :], endpoint, schema, service
    return None


async def _serve(request: Request, model: str, endpoint: str, schema: type[Any], service: Service) -> Response:
    state: ServerState = request.app.state.sift
    return await respond(request, state, model, endpoint, schema, service)


async def respond(
    request: Request, state: ServerState, model: str, endpoint: str, schema: type[Any], service: Service
) -> Response:
    started = time.perf_counter()
    try:
        body = await read_body_buffer(request, state.settings.max_body_bytes, state.settings.body_timeout_s)
        fmt = request_format(request.headers.get("content-type"))
        ctx = _context(request, started)
        decoded = await decode_sliced(body, fmt, schema, "items", Item)
        outcome = await service(state.registry, model, decoded, state.limits, ctx)
    except SiftError as error:
        state.metrics.count(model, endpoint, error.status)
        # The reference adds the runtime instance to errors inside the handler.
        return native_error(error, state.runtime_instance)
    out_fmt = response_format(request.headers.get("accept"))
    content = await encode_sliced(outcome.payload, out_fmt)
    headers = {"X-SIE-Server-Version": WIRE_COMPAT_VERSION, "X-SIE-Served-By": "local", "X-Request-ID": ctx.request_id}
    if endpoint != "extract":
        headers["X-SIE-Runtime-Instance"] = state.runtime_instance
    headers.update(outcome.timing.headers(time.perf_counter() - started))
    state.metrics.count(model, endpoint, 200, time.perf_counter() - started)
    media = MSGPACK_TYPE if out_fmt == "msgpack" else JSON_TYPE
    return Response(content, media_type=media, headers=headers)


async def serve_native(scope: Scope, receive: Receive, send: Send, state: ServerState) -> bool:
    """Answer a native POST straight from the ASGI scope, without FastAPI's
    routing, dependency solving and exception-middleware layers (about a fifth
    of the event loop's time per request on a small model). The routes below
    stay registered (OpenAPI, other methods' 405) and run the same ``respond``.
    Returns False when the scope is not a native POST (nothing was sent)."""
    if scope["method"] != "POST":
        return False
    target = endpoint_of(scope["path"])
    if target is None:
        return False
    model, endpoint, schema, service = target
    response = await respond(Request(scope, receive), state, model, endpoint, schema, service)
    await response(scope, receive, send)
    return True


# Reached through FastAPI only where the front door's NativeRoutes layer
# (serve_native) is not in front, e.g. the cluster worker's app.
@router.post("/v1/encode/{model:path}", summary="Embed items (dense vectors)")
async def encode_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "encode", EncodeBody, encode)


@router.post("/v1/score/{model:path}", summary="Rerank items against a query")
async def score_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "score", ScoreBody, score)


@router.post("/v1/extract/{model:path}", summary="Extract entities or classes from items")
async def extract_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "extract", ExtractBody, extract)
