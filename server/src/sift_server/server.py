"""Run the app under uvicorn with a graceful drain on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

import uvicorn

from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.core.state import ServerState

log = logging.getLogger("sift")
T = TypeVar("T")


# After the grace period the process exits within this much more, whatever is
# still running (uvicorn polls every 0.1 s; the rest is slack).
EXIT_SLACK_S = 0.25
# The last resort, later still: a C thread that needs no GIL ends the process
# (exit status 1) if the Python watchdog could not run in time.
BACKSTOP_S = 0.4


def lingering_threads() -> list[threading.Thread]:
    """Threads the interpreter would wait for at exit (a forward still running
    in a model's executor thread, for one)."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and t.is_alive() and not t.daemon]


def hard_exit(reason: str, exit_fn: Callable[[int], Any] = os._exit) -> None:
    """Leave now without joining worker threads: a forward still running in its
    executor thread is abandoned (its requests were already answered)."""
    names = [t.name for t in lingering_threads()]
    log.info("exit: %s%s", reason, f"; not waiting for threads {', '.join(names)}" if names else "")
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    exit_fn(0)


def arm_exit_watchdog(grace_s: float) -> None:
    """From now, the process is gone within ``grace_s`` + BACKSTOP_S, whatever
    still runs: a timer thread exits cleanly after EXIT_SLACK_S more and, should
    a thread hog the GIL or the interpreter hang, faulthandler's watchdog (C, no
    GIL) dumps the threads' stacks to stderr and exits a little later."""
    timer = threading.Timer(grace_s + EXIT_SLACK_S, hard_exit, args=("shutdown grace period over",))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(grace_s + BACKSTOP_S, exit=True)


def exit_after_drain(exit_fn: Callable[[int], Any] = os._exit) -> None:
    """The process has drained: leave now, without the interpreter's finalization,
    and without waiting for a thread still running (a forward in its executor
    thread, whose requests were answered). Finalization can take longer than what
    is left of the grace period (modules' and C libraries' teardown;
    docs/architecture.md, "Shutdown"), and the exit watchdog cannot cut it short (daemon
    threads stop running once it starts)."""
    hard_exit("stopped", exit_fn)


# glibc's mallopt parameter for the number of malloc arenas.
_M_ARENA_MAX = -8


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None  # not glibc: nothing to tune


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas. Every thread that allocates (the forward and
    prep threads, torch's pool) otherwise gets arenas of its own that keep freed
    memory, which shows up as RSS creeping up under steady load."""
    libc = _libc()
    if libc is None or arenas <= 0:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def collect_request_garbage() -> int:
    """A full collection. The raised thresholds (below) make full collections
    almost never happen on their own, so cyclic request garbage (exceptions with
    tracebacks, futures, closures) would pile up in the oldest generation. The
    models are frozen, so this scans only request objects: milliseconds."""
    started = time.perf_counter()
    found = gc.collect()
    if found >= 1000:
        log.info("periodic gc: %d unreachable objects in %.1f ms", found, (time.perf_counter() - started) * 1000)
    return found


async def reclaim_memory_periodically(interval_s: float) -> None:
    """Collect cyclic garbage, then hand freed heap pages back to the OS (the trim
    runs off the event loop), every ``interval_s``."""
    if interval_s <= 0:
        return
    libc = _libc()
    while True:
        await asyncio.sleep(interval_s)
        collect_request_garbage()
        if libc is not None:
            await asyncio.to_thread(libc.malloc_trim, 0)


class DrainingServer(uvicorn.Server):
    """First signal: stop admitting (503, /readyz false), let queued and
    in-flight work finish within the grace period, then exit (within
    EXIT_SLACK_S more, a watchdog makes sure). Second signal: exit at once."""

    def __init__(
        self,
        config: uvicorn.Config,
        state: ServerState,
        drain: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(config)
        self.sift_state = state
        # More to finish within the grace period once the models are closed (the gateway's requests).
        self._drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._trim: asyncio.Task[None] | None = None

    async def startup(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
        self._loop = asyncio.get_running_loop()
        # Before the lifespan loads the models (sift serve) or the gateway connects.
        if limit_malloc_arenas(self.sift_state.settings.malloc_arena_max):
            log.info("malloc arenas capped at %d", self.sift_state.settings.malloc_arena_max)
        self._trim = self._loop.create_task(
            reclaim_memory_periodically(self.sift_state.settings.malloc_trim_s), name="reclaim-memory"
        )
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.sift_state.draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        grace = self.sift_state.settings.shutdown_grace_s
        log.info("signal %s: draining (grace %.1fs)", sig, grace)
        self.sift_state.draining = True
        # Whatever uvicorn still waits for (a connection mid-body, a forward in a
        # non-daemon thread), the process is gone shortly after the grace period.
        arm_exit_watchdog(grace)
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain_then_exit()))

    async def _drain_then_exit(self) -> None:
        grace = self.sift_state.settings.shutdown_grace_s
        ends = time.monotonic() + grace
        await self.sift_state.close(grace)
        if self._drain is not None:
            await self._drain(max(0.0, ends - time.monotonic()))
        self.should_exit = True


def uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    """How ``sift serve`` and ``sift gateway`` run their app under uvicorn."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=settings.keep_alive_s,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )


def configure_logging(settings: Settings) -> None:
    """The log format and level of every Sift process (serve, gateway, worker)."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def tune_collector() -> None:
    """Fewer, cheaper collections in a process that holds models: their objects are
    frozen after load (registry), so the collector only ever scans request garbage."""
    gc.set_threshold(50_000, 50, 1000)


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed (as uvicorn does), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def serve(settings: Settings) -> None:
    configure_logging(settings)
    if settings.frontends > 0:
        # The request work in front-end processes, the models in an engine process.
        from sift_server.frontend.supervisor import run_split

        code = run_split(settings)
        if code:
            raise SystemExit(code)
        return
    tune_collector()
    state = build_state(settings)
    app = create_app(state)
    DrainingServer(uvicorn_config(app, settings), state).run()
    if state.draining:  # stopped by a signal (not, say, by a test's stand-in for uvicorn)
        exit_after_drain()
