"""Run the app under uvicorn with a graceful drain on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import FrameType

import uvicorn

from sift_server.api.app import build_state, create_app
from sift_server.api.state import ServerState
from sift_server.config import Settings

log = logging.getLogger("sift")


class DrainingServer(uvicorn.Server):
    """First signal: stop admitting (503, /readyz false), let queued and
    in-flight work finish within the grace period, then exit. Second signal:
    exit at once."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.sift_state = state
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.sift_state.draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        log.info("signal %s: draining (grace %.1fs)", sig, self.sift_state.settings.shutdown_grace_s)
        self.sift_state.draining = True
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain_then_exit()))

    async def _drain_then_exit(self) -> None:
        await self.sift_state.registry.close(self.sift_state.settings.shutdown_grace_s)
        self.should_exit = True


def serve(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Fewer, cheaper collections: the model's objects are frozen after load
    # (registry), so the collector only ever scans request garbage.
    gc.set_threshold(50_000, 50, 1000)
    state = build_state(settings)
    app = create_app(state)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=settings.keep_alive_s,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )
    DrainingServer(config, state).run()
