"""``sift gateway``: the HTTP API of ``sift serve`` with no model loaded.

Each request is checked as ``sift serve`` checks it before any model runs
(middleware: drain, API key, body size; then the body's decoding and the
model's existence), published to its model's work-queue subject, and answered
from the reply a worker publishes on this gateway's inbox. Exactly one answer
per request: replies are matched by request id and later ones are dropped.

The stream's publish ack is not awaited before the reply: it arrives on this
gateway's ack subject while the worker runs the request, and only a refusal
(the stream is full), a missing stream or no ack within ``publish_timeout_s``
fails the request (503 QUEUE_FULL), unless its reply came first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import nats
from fastapi import APIRouter, FastAPI, Request
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NoKeysError
from nats.js.kv import KeyValue
from prometheus_client import Counter
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
from sift_server.cluster.codec import FORWARDED_HEADERS, WorkReply, WorkRequest, pack_request, unpack_reply
from sift_server.cluster.heartbeat import describe_through_gateway
from sift_server.cluster.hops import (
    PUBLISHED_HEADER,
    STAMPS,
    format_stamps,
    gateway_header,
    stamp,
    stamps_enabled,
)
from sift_server.cluster.jetstream import ensure_stream, heartbeat_bucket
from sift_server.cluster.subjects import (
    ACK_PREFIX,
    DEADLINE_HEADER,
    MSG_ID_HEADER,
    REPLY_HEADER,
    REPLY_PREFIX,
    StreamLimits,
    ack_subject,
    model_of_heartbeat_key,
    model_token,
    reply_subject,
    work_subject,
)
from sift_server.core.embeddings import parse_embeddings
from sift_server.core.endpoints import BY_NAME, native_route
from sift_server.core.serve import new_request_id, request_id_of
from sift_server.core.state import ServerState
from sift_server.errors import QueueFull, QueueTimeout, SiftError
from sift_server.service.common import split_profile
from sift_server.wire.codec import decode_body
from sift_server.wire.negotiation import request_format

log = logging.getLogger(__name__)


class NoWorker(SiftError):
    """No live worker serves the model (yet): like a model still loading."""

    status, code, retry_after = 503, "MODEL_LOADING", 5


@dataclass(slots=True)
class GatewayOptions:
    nats_url: str = "nats://127.0.0.1:4222"
    limits: StreamLimits = field(default_factory=StreamLimits)
    # The longest a request waits for its reply (also its deadline on the worker).
    request_timeout_s: float = 60.0
    publish_timeout_s: float = 5.0
    heartbeat_ttl_s: float = 6.0
    # How often the set of live workers is re-read.
    liveness_poll_s: float = 0.5


@dataclass(slots=True)
class Waiting:
    """A request waiting for its reply; ``stamps``: its hop stamps (SIFT_HOP_STAMPS)."""

    future: asyncio.Future[WorkReply]
    model: str
    stamps: list[tuple[str, float]] | None = None
    acked: bool = False  # the stream answered its publish
    # Fails the request if the stream has not answered its publish in time.
    ack_timer: asyncio.TimerHandle | None = None


def ack_error(model: str, msg: Msg) -> SiftError | None:
    """What the stream's answer to a publish means for its request: None when it
    stored the message (or had it already: a duplicate id), else the 503 to answer."""
    status = msg.headers.get("Status") if msg.headers else None
    if status is not None and not msg.data:
        # 503: nothing listens on the subject (no stream); like nats-py's NoRespondersError.
        return QueueFull(f"The work queue is unavailable (status {status}); retry shortly.")
    if b'"error"' not in msg.data:
        return None  # {"stream": ..., "seq": ...}: stored
    try:
        described = json.loads(msg.data)["error"].get("description", "refused")
    except (ValueError, KeyError, AttributeError):
        described = "refused"
    return QueueFull(f"Model '{model}': the work queue is full ({described}); retry shortly.")


class Gateway:
    """The NATS side of the gateway: publish, await the reply, know live models."""

    def __init__(self, options: GatewayOptions, state: ServerState) -> None:
        self.options = options
        self.state = state
        self.gateway_id = uuid.uuid4().hex[:16]
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self.kv: KeyValue | None = None
        self.pending: dict[str, Waiting] = {}
        self.stamps = stamps_enabled()
        self.live: set[str] = set()
        self.live_keys: dict[str, list[str]] = {}
        self._live_read = 0.0
        self._poller: asyncio.Task[None] | None = None
        self.duplicates = Counter(
            "sift_gateway_duplicate_replies",
            "Replies dropped: their request was answered already",
            registry=state.metrics.registry,
        )
        self.refused = Counter(
            "sift_gateway_publish_refused",
            "Publishes refused by the work stream (full)",
            registry=state.metrics.registry,
        )

    async def start(self) -> None:
        self.nc = await nats.connect(
            self.options.nats_url.split(","), name=f"sift-gateway-{self.gateway_id}", max_reconnect_attempts=-1
        )
        self.js = self.nc.jetstream()
        await ensure_stream(self.js, self.options.limits)
        self.kv = await heartbeat_bucket(self.js, self.options.heartbeat_ttl_s)
        await self.nc.subscribe(f"{REPLY_PREFIX}.{self.gateway_id}.*", cb=self._on_reply)
        await self.nc.subscribe(f"{ACK_PREFIX}.{self.gateway_id}.*", cb=self._on_ack)
        await self.refresh_live()
        self._poller = asyncio.ensure_future(self._poll_live())

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def _on_reply(self, msg: Msg) -> None:
        request_id = msg.subject.rsplit(".", 1)[1]
        waiting = self.pending.get(request_id)
        if waiting is None or waiting.future.done():
            # A redelivered request answered twice (or after we gave up): drop it.
            self.duplicates.inc()
            return
        if waiting.stamps is not None:
            waiting.stamps.append(("g_reply", time.perf_counter()))
        waiting.future.set_result(unpack_reply(msg.data))

    async def _on_ack(self, msg: Msg) -> None:
        waiting = self.pending.get(msg.subject.rsplit(".", 1)[1])
        if waiting is None:
            return  # answered (or given up) already
        waiting.acked = True
        if waiting.ack_timer is not None:
            waiting.ack_timer.cancel()
            waiting.ack_timer = None
        if waiting.stamps is not None:
            waiting.stamps.append(("g_acked", time.perf_counter()))
        error = ack_error(waiting.model, msg)
        if error is not None:
            if msg.data:
                self.refused.inc()
            if not waiting.future.done():
                waiting.future.set_exception(error)

    def _ack_overdue(self, request_id: str) -> None:
        waiting = self.pending.get(request_id)
        if waiting is not None and not waiting.acked and not waiting.future.done():
            waiting.future.set_exception(QueueFull("The work queue is unavailable (no ack in time); retry shortly."))

    async def refresh_live(self) -> None:
        assert self.kv is not None
        keys: list[str] = []
        # An empty answer is read twice before it is believed: nats-py's keys() can
        # end its watch before an entry already on its way is processed and report
        # an empty bucket (nats-io/nats.py#842), which would turn a live worker's
        # model into 503 NO_WORKER. A non-empty answer is complete and authoritative.
        for _ in range(2):
            try:
                keys = await self.kv.keys()
                break
            except NoKeysError:
                continue
        live_keys: dict[str, list[str]] = {}
        for key in keys:
            live_keys.setdefault(model_of_heartbeat_key(key), []).append(key)
        self.live_keys = live_keys
        self.live = set(live_keys)
        self._live_read = time.monotonic()

    async def _poll_live(self) -> None:
        while True:
            await asyncio.sleep(self.options.liveness_poll_s)
            try:
                await self.refresh_live()
            except Exception as exc:
                log.warning("could not read worker heartbeats: %r", exc)

    async def has_worker(self, model: str) -> bool:
        token = model_token(model)
        if token in self.live:
            return True
        if time.monotonic() - self._live_read > 0.1:
            # A worker may have just started: look again before refusing.
            await self.refresh_live()
        return token in self.live

    async def worker_view(self, model: str) -> dict[str, Any] | None:
        """What a live worker's heartbeat says of the loaded model (None: no live worker)."""
        assert self.kv is not None
        for key in self.live_keys.get(model_token(model), []):
            try:
                entry = await self.kv.get(key)
            except Exception:
                continue  # gone since the last read
            if entry.value:
                view = json.loads(entry.value).get("model")
                if isinstance(view, dict):
                    return view
        return None

    async def call(self, model: str, work: WorkRequest, stamps: list[tuple[str, float]] | None = None) -> WorkReply:
        """Publish one request and wait for its reply (raises SiftError). ``stamps``
        (SIFT_HOP_STAMPS): the hop's gateway-side stamps are appended to it."""
        assert self.nc is not None
        if not await self.has_worker(model):
            raise NoWorker(f"No worker serves model '{model}' at the moment; retry shortly.")
        # Unique across gateways (a random per-process prefix): the stream deduplicates by it.
        request_id = new_request_id()
        timeout = self.options.request_timeout_s
        loop = asyncio.get_running_loop()
        waiting = Waiting(loop.create_future(), model, stamps)
        self.pending[request_id] = waiting
        now = time.time()
        headers = {
            MSG_ID_HEADER: request_id,
            REPLY_HEADER: reply_subject(self.gateway_id, request_id),
            DEADLINE_HEADER: stamp(now + timeout),
            PUBLISHED_HEADER: stamp(now),
        }
        payload = pack_request(work)
        if stamps is not None:
            stamps.append(("g_publish", time.perf_counter()))
        try:
            try:
                # The stream answers on our ack subject (_on_ack) while the request runs.
                await self.nc.publish(
                    work_subject(model), payload, reply=ack_subject(self.gateway_id, request_id), headers=headers
                )
            except nats.errors.Error as exc:
                raise QueueFull(f"The work queue is unavailable ({type(exc).__name__}); retry shortly.") from None
            if stamps is not None:
                stamps.append(("g_published", time.perf_counter()))
            if not waiting.acked and not waiting.future.done():
                waiting.ack_timer = loop.call_later(self.options.publish_timeout_s, self._ack_overdue, request_id)
            try:
                # asyncio.timeout, not wait_for: the reply wakes this task in one turn of the loop, not two.
                async with asyncio.timeout(timeout):
                    reply = await waiting.future
            except TimeoutError:
                raise QueueTimeout(
                    f"Model '{model}': no worker answered within {timeout:g} s; retry shortly."
                ) from None
            if stamps is not None:
                stamps.append(("g_resume", time.perf_counter()))
            return reply
        finally:
            self.pending.pop(request_id, None)
            if waiting.ack_timer is not None:
                waiting.ack_timer.cancel()


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
    """The headers the worker's routes read, straight from the scope (decoding
    only those): building Starlette's Headers and URL objects for this was about
    0.07 ms of a lone request's way to its publish on this repository's VM."""
    raw: list[tuple[bytes, bytes]] = request.scope["headers"]
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k in _FORWARDED_RAW]
    headers.append(("x-request-id", request_id))
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
    return app


def serve_gateway(settings: Any, options: GatewayOptions) -> None:
    """Run the gateway under uvicorn; SIGTERM: refuse new requests, finish those in flight."""
    from sift_server.composition import build_state
    from sift_server.server import DrainingServer, configure_logging, uvicorn_config

    configure_logging(settings)
    state = build_state(settings)
    app = create_gateway_app(state, options)
    DrainingServer(uvicorn_config(app, settings), state).run()
