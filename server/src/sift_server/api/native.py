"""The SIE v1 native routes: encode, score, extract."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from sift_server import WIRE_COMPAT_VERSION
from sift_server.api.body import read_body, wait_for_disconnect
from sift_server.api.errors import native_error
from sift_server.api.state import ServerState
from sift_server.errors import SiftError
from sift_server.service.encode import encode
from sift_server.service.run import RequestContext
from sift_server.service.timing import Timing
from sift_server.wire.codec import decode_body, encode_body
from sift_server.wire.negotiation import JSON_TYPE, MSGPACK_TYPE, Format, request_format, response_format
from sift_server.wire.schemas import EncodeBody, ExtractBody, ScoreBody

router = APIRouter()

Handler = Callable[[ServerState, str, bytes, Format, RequestContext], Awaitable[tuple[dict[str, Any], Timing | None]]]


def _context(request: Request, started: float) -> RequestContext:
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    return RequestContext(
        request_id=request_id,
        started=started,
        ingress=request.scope.get("sift.ingress"),
        disconnected=lambda: wait_for_disconnect(request),
    )


async def _serve(request: Request, model: str, endpoint: str, handler: Handler) -> Response:
    started = time.perf_counter()
    state: ServerState = request.app.state.sift
    try:
        body = await read_body(request, state.settings.max_body_bytes)
        fmt = request_format(request.headers.get("content-type"))
        ctx = _context(request, started)
        payload, timing = await handler(state, model, body, fmt, ctx)
    except SiftError as error:
        state.metrics.requests.labels(model, endpoint, str(error.status)).inc()
        # The reference adds the runtime instance to errors inside the handler.
        return native_error(error, state.runtime_instance)
    out_fmt = response_format(request.headers.get("accept"))
    content = encode_body(payload, out_fmt)
    headers = {"X-SIE-Server-Version": WIRE_COMPAT_VERSION, "X-SIE-Served-By": "local", "X-Request-ID": ctx.request_id}
    if endpoint != "extract":
        headers["X-SIE-Runtime-Instance"] = state.runtime_instance
    if timing is not None:
        headers.update(timing.headers(time.perf_counter() - started))
    state.metrics.requests.labels(model, endpoint, "200").inc()
    state.metrics.duration.labels(model, endpoint, "total").observe(time.perf_counter() - started)
    media = MSGPACK_TYPE if out_fmt == "msgpack" else JSON_TYPE
    return Response(content, media_type=media, headers=headers)


async def _encode(
    state: ServerState, model: str, body: bytes, fmt: Format, ctx: RequestContext
) -> tuple[dict[str, Any], Timing | None]:
    parsed = decode_body(body, fmt, EncodeBody)
    outcome = await encode(state.registry, model, parsed, state.limits, ctx)
    return outcome.payload, outcome.timing


async def _score(
    state: ServerState, model: str, body: bytes, fmt: Format, ctx: RequestContext
) -> tuple[dict[str, Any], Timing | None]:
    from sift_server.service.score import score

    parsed = decode_body(body, fmt, ScoreBody)
    outcome = await score(state.registry, model, parsed, state.limits, ctx)
    return outcome.payload, outcome.timing


async def _extract(
    state: ServerState, model: str, body: bytes, fmt: Format, ctx: RequestContext
) -> tuple[dict[str, Any], Timing | None]:
    from sift_server.service.extract import extract

    parsed = decode_body(body, fmt, ExtractBody)
    outcome = await extract(state.registry, model, parsed, state.limits, ctx)
    return outcome.payload, outcome.timing


@router.post("/v1/encode/{model:path}", summary="Embed items (dense vectors)")
async def encode_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "encode", _encode)


@router.post("/v1/score/{model:path}", summary="Rerank items against a query")
async def score_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "score", _score)


@router.post("/v1/extract/{model:path}", summary="Extract entities or classes from items")
async def extract_route(request: Request, model: str) -> Response:
    return await _serve(request, model, "extract", _extract)
