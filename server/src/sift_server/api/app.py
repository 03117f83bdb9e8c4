"""Assemble the ASGI application from settings."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from sift_server import __version__
from sift_server.api import health, models, native, openai
from sift_server.api.errors import routing_error
from sift_server.api.middleware import FRONT_DOOR
from sift_server.composition import build_state
from sift_server.core.endpoints import route
from sift_server.core.state import ServerState
from sift_server.telemetry.asgi import TraceRequests

# build_state is the composition root's (sift_server.composition); named here for older imports.
__all__ = ["build_state", "create_app"]

log = logging.getLogger(__name__)


class SiftApp(FastAPI):
    """FastAPI with the front door outermost: a work POST passes the front door's
    checks and is answered by its last layer (NativeRoutes) before FastAPI's own
    layers (error page, telemetry, body limit) and router, which serve everything
    else. An exception escaping the work path is answered 500 by the HTTP server."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A work POST goes straight to the built stack: FastAPI's and Starlette's own
        # entry (root path, its telemetry check, the stack's lazy build) is per-request
        # work those routes do not use. Everything else takes FastAPI's entry.
        stack = self.middleware_stack
        if stack is not None and scope["type"] == "http" and scope["method"] == "POST" and route(scope["path"]):
            scope["app"] = self
            if self.root_path:
                scope["root_path"] = self.root_path
            await stack(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        for layer in FRONT_DOOR:  # innermost first
            app = layer(app, state=self.state.sift)
        return TraceRequests(app)  # outermost: a request's span covers every layer


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

    app = SiftApp(
        title="Sift",
        version=__version__,
        description="Inference server for embedders, rerankers and zero-shot extractors (SIE v1 wire protocol).",
        lifespan=lifespan,
    )
    app.state.sift = state
    app.add_exception_handler(StarletteHTTPException, routing_error)
    for module in (native, openai, models, health):
        app.include_router(module.router)
    return app
