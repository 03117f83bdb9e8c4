"""``sift gateway``: the HTTP API of ``sift serve`` with no model loaded.

The same app as ``sift serve``'s (api/app.py: the front door, the work routes
of the endpoint table, the body path, /v1/models) with another handler: each
request is checked as ``sift serve`` checks it before any model runs (the
body's decoding by the serving core's ``decode``, the model's existence), then
handed to the NATS side (cluster.gateway_client), which publishes it to its
model's work queue and returns the worker's reply; the reply is relayed as it
came, with the gateway's timing header.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI

from sift_server.api.app import SiftApp, api_app
from sift_server.api.models import Describe, model_info
from sift_server.api.work import Handler
from sift_server.cluster.codec import FORWARDED_HEADERS, WorkReply, WorkRequest
from sift_server.cluster.gateway_client import Gateway, GatewayOptions, ReplyStream
from sift_server.cluster.heartbeat import describe_through_gateway
from sift_server.cluster.hops import STAMPS, format_stamps, gateway_header
from sift_server.core.serve import Call, Reply, decode, request_id_of
from sift_server.core.state import ServerState
from sift_server.errors import SiftError
from sift_server.service.common import catalog_name, split_profile
from sift_server.telemetry import propagation
from sift_server.wire.negotiation import JSON_TYPE

log = logging.getLogger(__name__)


def _relay(
    reply: WorkReply | ReplyStream,
    started: float,
    stamps: list[tuple[str, float]] | None = None,
    disconnected: Callable[[], Awaitable[Any]] | None = None,
) -> Reply:
    """The worker's reply as it came (a streamed one chunk by chunk: its gateway
    time is to its head), with the gateway's timing header (and the hop stamps)."""
    headers: dict[str, str] = {}
    media_type = JSON_TYPE
    for name, value in reply.headers:
        lowered = name.lower()
        if lowered == "content-type":
            media_type = value
        elif lowered != "content-length":
            headers[name] = value
    answered = time.perf_counter()
    name, value = gateway_header(started, answered)
    headers[name] = value
    if stamps is not None:
        # The worker's stamps (relayed in the reply) and the gateway's own.
        ours = format_stamps([("g_start", started), *stamps, ("g_answer", answered)])
        headers[STAMPS] = f"{headers[STAMPS]};{ours}" if headers.get(STAMPS) else ours
    if isinstance(reply, ReplyStream):
        return Reply(reply.status, headers, reply.body(disconnected), media_type)
    return Reply(reply.status, headers, reply.body, media_type)


_FORWARDED = frozenset(FORWARDED_HEADERS - {"x-request-id"})  # the request id is set apart


def _forwarded(call: Call, request_id: str) -> list[tuple[str, str]]:
    """The headers the worker's serving core reads, and the trace context."""
    headers = [(name, value) for name, value in call.headers.items() if name in _FORWARDED]
    headers.append(("x-request-id", request_id))
    headers.extend(propagation.context_headers())  # the trace continues in the worker
    return headers


def _path(call: Call) -> str:
    endpoint = call.endpoint
    return endpoint.path + call.model if endpoint.model_in_path else endpoint.path


def forward_to_workers(state: ServerState, gateway: Gateway) -> Handler:
    """The gateway's handler of the work routes (api/work.py): the body decoded as
    ``sift serve`` decodes it (a malformed body never reaches the queue) and the
    model checked, then the request published to its model's queue and the
    worker's reply relayed."""

    async def forward(call: Call) -> Reply:
        model, endpoint = call.model, call.endpoint.name
        try:
            model, _ = await decode(call)
            name = catalog_name(state.registry.records, split_profile(model)[0])
            state.registry.record(name)
            work = WorkRequest(_path(call), _forwarded(call, request_id_of(call.headers)), call.body)
            stamps: list[tuple[str, float]] | None = [] if gateway.stamps else None
            reply = await gateway.call(name, work, stamps)
        except SiftError as error:
            state.metrics.count(model, endpoint, error.status)
            raise
        state.metrics.count(model, endpoint, reply.status, time.perf_counter() - call.started)
        return _relay(reply, call.started, stamps, call.disconnected)

    return forward


def describe_with_workers(gateway: Gateway) -> Describe:
    """``/v1/models``: the catalog's entry and what a live worker's heartbeat says."""

    async def describe(state: ServerState, name: str) -> dict[str, Any]:
        entry, profile = state.registry.catalog.addressed(name)
        record = state.registry.record(entry)
        view = await gateway.worker_view(entry) if await gateway.has_worker(entry) else None
        return describe_through_gateway(model_info(record, state.runtime_instance, profile), view)

    return describe


def create_gateway_app(state: ServerState, gateway: Gateway) -> SiftApp:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        state.ready = True
        log.info("gateway ready: NATS %s, id %s", gateway.options.nats_url, gateway.gateway_id)
        try:
            yield
        finally:
            state.draining = True
            await gateway.stop()

    api = api_app(
        state,
        title="Sift gateway",
        description="Sift's HTTP API in front of workers on NATS JetStream.",
        lifespan=lifespan,
        describe=describe_with_workers(gateway),
    )
    return SiftApp(api, forward_to_workers(state, gateway))


def serve_gateway(settings: Any, options: GatewayOptions) -> None:
    """Run the gateway under uvicorn; SIGTERM: refuse new requests, relay the replies
    that come within the grace period, answer the rest 503 SHUTTING_DOWN."""
    from sift_server.composition import build_state
    from sift_server.server import DrainingServer, configure_logging, exit_after_drain, uvicorn_config

    configure_logging(settings)
    state = build_state(settings)
    gateway = Gateway(options, state)
    app = create_gateway_app(state, gateway)
    DrainingServer(uvicorn_config(app, settings), state, drain=gateway.drain).run()
    if state.draining:
        exit_after_drain()
