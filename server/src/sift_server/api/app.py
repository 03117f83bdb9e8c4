"""Assemble the ASGI application from settings."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from functools import partial

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from sift_server import __version__
from sift_server.adapters.base import Adapter
from sift_server.api import health, models, native, openai
from sift_server.api.errors import OPENAI_PATH, openai_envelope
from sift_server.api.middleware import install_front_door
from sift_server.api.state import ServerState
from sift_server.config import Settings
from sift_server.engine.batch_queue import Caps
from sift_server.engine.policy import make_policy
from sift_server.engine.scheduler import SchedulerConfig
from sift_server.engine.trace import JsonlTrace, TraceSink
from sift_server.engine.worker import ModelWorker, WorkerConfig
from sift_server.errors import SiftError
from sift_server.metrics import Metrics
from sift_server.registry.calibrate import Curve, load_caps
from sift_server.registry.catalog import Catalog, CatalogError, ModelSpec
from sift_server.registry.loader import load_adapter
from sift_server.registry.registry import AdapterLoader, Registry
from sift_server.service.common import Limits
from sift_server.telemetry import tracing
from sift_server.telemetry.asgi import TraceRequests
from sift_server.telemetry.forwards import forward_spans

log = logging.getLogger(__name__)


def build_state(
    settings: Settings, *, loader: AdapterLoader | None = None, catalog: Catalog | None = None
) -> ServerState:
    catalog = catalog or Catalog.from_dirs(settings.catalog)
    for name in [settings.default_model, *settings.preload]:
        if name not in catalog:
            raise CatalogError(f"model {name!r} is not in the catalog; known: {', '.join(catalog.names())}")
    metrics = Metrics(frozenset(catalog.names()))
    trace: TraceSink | None = JsonlTrace(settings.trace_file) if settings.trace_file else None
    policy = make_policy(
        settings.policy,
        max_hold_ms=settings.max_hold_ms,
        max_burst_hold_ms=settings.max_burst_hold_ms,
        idle_coalesce_ms=settings.idle_coalesce_ms,
        max_wait_ms=settings.max_batch_wait_ms,
    )

    def worker_factory(spec: ModelSpec, adapter: Adapter, curve: Curve | None) -> ModelWorker:
        batching = spec.batching
        caps = Caps(
            max_requests=batching.max_batch_requests or settings.max_batch_requests,
            max_cost=batching.max_batch_cost or settings.max_batch_cost,
        )
        scheduling = SchedulerConfig(
            caps=caps,
            load_caps=load_caps(curve, caps),
            max_queue_items=batching.max_queue_items or settings.max_queue_items,
            queue_timeout=settings.queue_timeout_s,
            link_gap=settings.link_gap_ms / 1000,
            busy_link_gap=settings.busy_link_gap_ms / 1000,
            quiet_gap=settings.quiet_gap_ms / 1000,
            return_horizon=settings.return_horizon_ms / 1000,
            shared_core=len(os.sched_getaffinity(0)) <= 1 if hasattr(os, "sched_getaffinity") else False,
        )
        config = WorkerConfig(scheduler=scheduling, forward_nice=settings.forward_nice)
        spans = forward_spans(lambda: str(adapter.info.runtime.get("backend", "torch")))
        worker = ModelWorker(
            spec.name, adapter.forward, policy, config, trace=trace, observers=[metrics.observe_forward, spans]
        )
        if curve is not None:
            worker.scheduler.seed_costs(curve.points)
        return worker

    registry = Registry(
        catalog,
        worker_factory,
        memory_budget_bytes=settings.memory_budget_mb * 2**20,
        loader=loader or partial(load_adapter, torch_threads=settings.torch_threads),
        calibrate=settings.calibrate,
        recent_use_s=settings.evict_idle_s,
    )
    metrics.watch_models(registry.model_states)
    tracing.start(settings.otlp_endpoint)
    limits = Limits(max_item_bytes=settings.max_item_bytes, max_items=settings.max_request_items)
    return ServerState(settings=settings, registry=registry, limits=limits, metrics=metrics)


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Routing errors (405 and the like) keep FastAPI's ``{"detail": ...}`` except on
    the OpenAI route, whose clients read the OpenAI envelope."""
    assert isinstance(exc, StarletteHTTPException)
    if request.url.path != OPENAI_PATH:
        return await http_exception_handler(request, exc)
    error = SiftError(str(exc.detail))
    error.status, error.code = exc.status_code, _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}").upper()
    status, body, headers = openai_envelope(error)
    return JSONResponse(body, status_code=status, headers={**(exc.headers or {}), **headers})


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def create_app(state: ServerState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for name in dict.fromkeys([state.settings.default_model, *state.settings.preload]):
            await state.registry.load_now(name)
        state.ready = True
        log.info("ready: serving %s", state.settings.default_model)
        try:
            yield
        finally:
            state.draining = True
            await state.registry.close(state.settings.shutdown_grace_s)

    app = FastAPI(
        title="Sift",
        version=__version__,
        description="Inference server for embedders, rerankers and zero-shot extractors (SIE v1 wire protocol).",
        lifespan=lifespan,
    )
    app.state.sift = state
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    for module in (native, openai, models, health):
        app.include_router(module.router)
    install_front_door(app, state, answer_native=True)
    app.add_middleware(TraceRequests)  # outermost: a request's span covers every layer
    return app
