"""Assemble the ASGI application: ``sift serve``'s here, the gateway's in
cluster/gateway.py, both through :class:`SiftApp` and :func:`api_app`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from sift_server import __version__
from sift_server.api import health, openapi
from sift_server.api.errors import routing_error
from sift_server.api.middleware import front_door
from sift_server.api.models import Describe, describe_local, models_router
from sift_server.api.work import Handler, WorkRoutes
from sift_server.core.serve import Call, Reply, handle
from sift_server.core.state import ServerState
from sift_server.telemetry.asgi import TraceRequests

log = logging.getLogger(__name__)

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


class SiftApp:
    """The app ``sift serve`` and ``sift gateway`` run, from the outside in: one
    span per request (telemetry), the front door (api/middleware.py), the work
    routes with ``handler`` (api/work.py), and ``api`` (FastAPI: models, health,
    /docs, /openapi.json, the routing errors, the lifespan) for everything else."""

    def __init__(self, api: FastAPI, handler: Handler) -> None:
        self.api = api
        self.state: ServerState = api.state.sift
        self.app = TraceRequests(front_door(WorkRoutes(self.state, handler, default=api), self.state))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def lifespan(self) -> AbstractAsyncContextManager[object]:
        """The app's startup and shutdown, for a caller that runs no ASGI server (tests)."""
        return self.api.router.lifespan_context(self.api)


def api_app(state: ServerState, *, title: str, description: str, lifespan: Lifespan, describe: Describe) -> FastAPI:
    """The FastAPI part: the models routes (``describe``), the probes and metrics, and
    an OpenAPI document that describes the work routes too (api/openapi.py)."""
    app = FastAPI(title=title, version=__version__, description=description, lifespan=lifespan)
    app.state.sift = state
    app.add_exception_handler(StarletteHTTPException, routing_error)
    app.include_router(models_router(describe))
    app.include_router(health.router)
    openapi.install(app)
    return app


@contextlib.asynccontextmanager
async def serving(state: ServerState, ready: str = "ready") -> AsyncIterator[None]:
    """A server's lifetime: the default and preloaded models loaded, then ready; on the
    way out, draining within the grace period."""
    for name in dict.fromkeys([state.settings.default_model, *state.settings.preload]):
        await state.registry.load_now(name)
    state.ready = True
    log.info("%s: serving %s", ready, state.settings.default_model)
    try:
        yield
    finally:
        state.draining = True
        await state.close(state.settings.shutdown_grace_s)


def create_app(state: ServerState) -> SiftApp:
    """``sift serve``: the work routes answered by the local serving core."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with serving(state):
            yield

    async def serve(call: Call) -> Reply:
        return await handle(state, call)

    api = api_app(
        state,
        title="Sift",
        description="Inference server for embedders, rerankers and zero-shot extractors (SIE v1 wire protocol).",
        lifespan=lifespan,
        describe=describe_local,
    )
    return SiftApp(api, serve)
