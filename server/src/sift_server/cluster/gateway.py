"""``sift gateway``: the HTTP API of ``sift serve`` with no model loaded.

Each request is checked as ``sift serve`` checks it before any model runs
(middleware: drain, API key, body size; then the body's decoding and the
model's existence), then handed to the NATS side (cluster.gateway_client),
which publishes it to its model's work queue and returns the worker's reply;
the reply is relayed as it came, with the gateway's timing header.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sift_server import __version__
from sift_server.api import health
from sift_server.api.body import read_body
from sift_server.api.errors import native_error, openai_error, routing_error
from sift_server.api.middleware import install_front_door
from sift_server.api.models import model_info
from sift_server.api.openai import OPENAPI_BODY
from sift_server.cluster.codec import FORWARDED_HEADERS, WorkReply, WorkRequest
from sift_server.cluster.gateway_client import Gateway, GatewayOptions
from sift_server.cluster.heartbeat import describe_through_gateway
from sift_server.cluster.hops import STAMPS, format_stamps, gateway_header
from sift_server.core.embeddings import parse_embeddings
from sift_server.core.endpoints import BY_NAME, native_route
from sift_server.core.serve import request_id_of
from sift_server.core.state import ServerState
from sift_server.errors import SiftError
from sift_server.service.common import split_profile
from sift_server.telemetry import propagation
from sift_server.telemetry.asgi import TraceRequests
from sift_server.wire.codec import decode_body
from sift_server.wire.negotiation import request_format

log = logging.getLogger(__name__)


def _relay(reply: WorkReply, started: float, stamps: list[tuple[str, float]] | None = None) -> Response:
    headers = {k: v for k, v in reply.headers if k.lower() != "content-length"}
    answered = time.perf_counter()
    name, value = gateway_header(started, answered)
    headers[name] = value
    if stamps is not None:
        # The worker's stamps (relayed in the reply) and the gateway's own.
        ours = format_stamps([("g_start", started), *stamps, ("g_answer", answered)])
        headers[STAMPS] = f"{headers[STAMPS]};{ours}" if headers.get(STAMPS) else ours
    return Response(reply.body, status_code=reply.status, headers=headers)


# The forwarded headers as the ASGI scope spells them (lower-case bytes); the request id is set apart.
_FORWARDED_RAW = frozenset(name.encode("latin-1") for name in FORWARDED_HEADERS if name != "x-request-id")


def _forwarded(request: Request, request_id: str) -> list[tuple[str, str]]:
    """The headers the worker's serving core reads, straight from the scope (decoding
    only those): building Starlette's Headers and URL objects for them was a
    visible part of a lone request's way to its publish (docs/benchmarks/scaleout.md)."""
    raw: list[tuple[bytes, bytes]] = request.scope["headers"]
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k in _FORWARDED_RAW]
    headers.append(("x-request-id", request_id))
    headers.extend(propagation.context_headers())  # the trace continues in the worker
    return headers


router = APIRouter()


async def _native(request: Request, model: str, endpoint: str) -> Response:
    started = time.perf_counter()
    state: ServerState = request.app.state.sift
    gateway: Gateway = request.app.state.gateway
    name, _ = split_profile(model)
    try:
        body = await read_body(request, state.settings.max_body_bytes, state.settings.body_timeout_s)
        # The same decoding as sift serve: a malformed body never reaches the queue.
        decode_body(body, request_format(request.headers.get("content-type")), BY_NAME[endpoint].schema)
        state.registry.record(name)
        work = WorkRequest(request.scope["path"], _forwarded(request, request_id_of(request.headers)), body)
        stamps: list[tuple[str, float]] | None = [] if gateway.stamps else None
        reply = await gateway.call(name, work, stamps)
    except SiftError as error:
        state.metrics.count(model, endpoint, error.status)
        return native_error(error, state.runtime_instance)
    state.metrics.count(model, endpoint, reply.status, time.perf_counter() - started)
    return _relay(reply, started, stamps)


@router.post("/v1/encode/{model:path}", summary="Embed items (dense vectors)")
async def encode_route(request: Request, model: str) -> Response:
    return await _native(request, model, "encode")


@router.post("/v1/score/{model:path}", summary="Rerank items against a query")
async def score_route(request: Request, model: str) -> Response:
    return await _native(request, model, "score")


@router.post("/v1/extract/{model:path}", summary="Extract entities or classes from items")
async def extract_route(request: Request, model: str) -> Response:
    return await _native(request, model, "extract")


@router.post("/v1/embeddings", summary="OpenAI-compatible embeddings", openapi_extra=OPENAPI_BODY)
async def embeddings(request: Request) -> Response:
    started = time.perf_counter()
    state: ServerState = request.app.state.sift
    gateway: Gateway = request.app.state.gateway
    model = ""
    try:
        raw = await read_body(request, state.settings.max_body_bytes, state.settings.body_timeout_s)
        # The same parsing as sift serve's route: a malformed body never reaches the queue.
        body = await parse_embeddings(raw, request.headers.get("content-type"))
        model = body.model
        state.registry.record(model)
        work = WorkRequest(request.scope["path"], _forwarded(request, request_id_of(request.headers)), raw)
        reply = await gateway.call(model, work)
    except SiftError as error:
        state.metrics.count(model, "embeddings", error.status)
        return openai_error(error)
    state.metrics.count(model, "embeddings", reply.status, time.perf_counter() - started)
    return _relay(reply, started)


async def _described(gateway: Gateway, state: ServerState, name: str) -> dict[str, Any]:
    record = state.registry.record(name)
    view = await gateway.worker_view(name) if await gateway.has_worker(name) else None
    return describe_through_gateway(model_info(record, state.runtime_instance), view)


@router.get("/v1/models", summary="List the catalog's models")
async def list_models(request: Request) -> Response:
    state: ServerState = request.app.state.sift
    gateway: Gateway = request.app.state.gateway
    described = [await _described(gateway, state, name) for name in state.registry.catalog.names()]
    return JSONResponse({"models": described})


@router.get("/v1/models/{model:path}", summary="Describe one model")
async def get_model(request: Request, model: str) -> Response:
    state: ServerState = request.app.state.sift
    try:
        return JSONResponse(await _described(request.app.state.gateway, state, model))
    except SiftError as error:
        return native_error(error)


class GatewayNativeRoutes:
    """The native POSTs answered straight from the ASGI scope, as ``sift serve``'s
    NativeRoutes layer does: FastAPI's routing, dependency solving and exception
    layers cost about a fifth of a millisecond per request on this path. The
    routes above stay registered (OpenAPI, other methods' 405) and run the same
    ``_native``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            target = native_route(scope["path"])
            if target is not None:
                endpoint, model = target
                response = await _native(Request(scope, receive), model, endpoint.name)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_gateway_app(state: ServerState, options: GatewayOptions) -> FastAPI:
    gateway = Gateway(options, state)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        state.ready = True
        log.info("gateway ready: NATS %s, id %s", options.nats_url, gateway.gateway_id)
        try:
            yield
        finally:
            state.draining = True
            await gateway.stop()

    app = FastAPI(
        title="Sift gateway",
        version=__version__,
        description="Sift's HTTP API in front of workers on NATS JetStream.",
        lifespan=lifespan,
    )
    app.state.sift = state
    app.state.gateway = gateway
    app.add_exception_handler(StarletteHTTPException, routing_error)
    for module_router in (router, health.router):
        app.include_router(module_router)
    app.add_middleware(GatewayNativeRoutes)  # innermost: inside the front door's checks
    install_front_door(app, state, answer_native=False)
    app.add_middleware(TraceRequests)  # outermost: a request's span covers every layer
    return app


def serve_gateway(settings: Any, options: GatewayOptions) -> None:
    """Run the gateway under uvicorn; SIGTERM: refuse new requests, relay the replies
    that come within the grace period, answer the rest 503 SHUTTING_DOWN."""
    from sift_server.composition import build_state
    from sift_server.server import DrainingServer, configure_logging, exit_after_drain, uvicorn_config

    configure_logging(settings)
    state = build_state(settings)
    app = create_gateway_app(state, options)
    gateway: Gateway = app.state.gateway
    DrainingServer(uvicorn_config(app, settings), state, drain=gateway.drain).run()
    if state.draining:
        exit_after_drain()
