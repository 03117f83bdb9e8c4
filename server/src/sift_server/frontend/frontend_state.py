"""A front-end's serving state and app: the same routes, services and envelopes as
``sift serve``, over a registry whose models are prepare-side copies of the adapters
(``Adapter.loads_prepare_only``; otherwise a load on the reference, never a decision) and
whose engines are :class:`RemoteEngine`: loading, batching and forwards are the engine
process's."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from sift_server.adapters.base import Adapter
from sift_server.api.app import SiftApp, api_app, serving
from sift_server.composition import limits_of
from sift_server.config import Settings
from sift_server.core.serve import Call, Reply, handle
from sift_server.core.state import ServerState
from sift_server.engine.model_engine import ModelEngine
from sift_server.engine.policy import make_policy
from sift_server.errors import InvalidInput, SiftError
from sift_server.frontend.client import EngineLink, RemoteEngine
from sift_server.frontend.protocol import Count
from sift_server.metrics import Metrics
from sift_server.registry.calibrate import Curve
from sift_server.registry.catalog import Catalog, ModelSpec
from sift_server.registry.loader import adapter_class, load_adapter
from sift_server.registry.registry import ModelRecord, Registry
from sift_server.registry.residency import ResidencyConfig
from sift_server.registry.switching import first_spec
from sift_server.service.prep import PrepThread

log = logging.getLogger(__name__)


def prepare_side(spec: ModelSpec, settings: Settings) -> Adapter:
    """The adapter a front-end prepares with: without its network where the adapter
    can load so, else on the reference (``auto`` decides in the engine process only)."""
    if adapter_class(spec.adapter).loads_prepare_only:
        return load_adapter(spec, 1, cache_dir=settings.cache_dir, prepare_only=True)
    first = first_spec(spec, settings.backend) or spec
    return load_adapter(first, 1, backend_override=settings.backend, cache_dir=settings.cache_dir, recorded_only=False)


class FrontendRegistry(Registry):
    """A registry whose refusals also ask the engine process to load the model."""

    def __init__(self, link: EngineLink, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.link = link

    def ready_engine(self, name: str) -> tuple[ModelRecord, ModelEngine]:
        if "generate" in self.record(name).spec.tasks:
            # A generation runs in its adapter, not through an engine's submit: not split.
            raise InvalidInput(
                f"Model '{name}' generates text, which `sift serve --frontends` does not serve; "
                "serve it without --frontends.",
                param="model",
            )
        try:
            return super().ready_engine(name)
        except SiftError:
            if name in self.records and not self.link.lost:
                self.link.send_want(name)
            raise


class FrontendMetrics(Metrics):
    """Request counts go to the engine process, which serves the whole server's metrics."""

    def __init__(self, link: EngineLink, known_models: frozenset[str]) -> None:
        super().__init__(known_models)
        self.link = link

    def count(self, model: str, endpoint: str, status: int, seconds: float | None = None) -> None:
        if not self.link.lost:
            self.link.send_later(Count(model, endpoint, status, seconds))


def frontend_state(settings: Settings, link: EngineLink) -> ServerState:
    catalog = Catalog.from_dirs(settings.catalog)
    metrics = FrontendMetrics(link, frozenset(catalog.names()))
    policy = make_policy(settings.policy, max_hold_ms=settings.max_hold_ms, max_wait_ms=settings.max_batch_wait_ms)

    def remote_engine(spec: ModelSpec, adapter: Adapter, curve: Curve | None) -> ModelEngine:
        return RemoteEngine(spec.name, link, policy)

    registry = FrontendRegistry(
        link,
        catalog,
        remote_engine,
        memory_budget_bytes=settings.memory_budget_mb * 2**20,
        loader=lambda spec: prepare_side(spec, settings),
        residency=ResidencyConfig(
            linger_s=settings.evict_idle_s, payback=settings.swap_payback, min_turn_s=settings.min_turn_s
        ),
        decide_in_background=False,
        backend_override=settings.backend,
    )
    return ServerState(
        settings=settings, registry=registry, limits=limits_of(settings), metrics=metrics, prep=PrepThread()
    )


def frontend_app(state: ServerState, link: EngineLink, engine: socket.socket) -> SiftApp:
    """``sift serve``'s app in a front-end: ready once the engine process has loaded its
    models and this front-end its prepare-side copies; /v1/models asks the engine process."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await link.connect(engine)
        await link.ask("ready")
        async with serving(state, "front-end ready"):
            yield

    async def describe(state: ServerState, name: str) -> dict[str, Any]:
        # MODEL_NOT_FOUND here, with its hint; a profile ({name}:{profile}) is its entry's.
        state.registry.record(state.registry.catalog.addressed(name)[0])
        info: dict[str, Any] = await link.ask("describe", name)
        return info

    async def serve(call: Call) -> Reply:
        return await handle(state, call)

    api = api_app(
        state,
        title="Sift",
        description="Inference server for embedders, rerankers and zero-shot extractors (SIE v1 wire protocol).",
        lifespan=lifespan,
        describe=describe,
    )

    async def metrics() -> Response:
        text: bytes = await link.ask("metrics")
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    # /metrics: the engine process's text (the models, their forwards, every front-end's
    # requests), matched before the one api_app includes.
    api.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
    api.router.routes.insert(0, api.router.routes.pop())

    return SiftApp(api, serve)
