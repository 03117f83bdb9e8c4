"""Assemble the ASGI application from settings."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException

from sift_server import __version__
from sift_server.api import health, models, native, openai
from sift_server.api.errors import routing_error
from sift_server.api.middleware import install_front_door
from sift_server.composition import build_state
from sift_server.core.state import ServerState

# build_state is the composition root's (sift_server.composition); named here for older imports.
__all__ = ["build_state", "create_app"]

log = logging.getLogger(__name__)


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
    app.add_exception_handler(StarletteHTTPException, routing_error)
    for module in (native, openai, models, health):
        app.include_router(module.router)
    install_front_door(app, state, answer_native=True)
    return app
