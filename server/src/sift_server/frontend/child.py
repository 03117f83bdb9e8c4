"""The processes of ``sift serve --frontends N``, started by the supervisor:

    python -m sift_server.frontend.child engine PARENT_PID FD [FD ...]
    python -m sift_server.frontend.child frontend PARENT_PID FD

Each reads its configuration (the settings and the server's runtime instance id) as JSON
on stdin; FD is its end of a socketpair to the other side. Each ends with its parent
(PR_SET_PDEATHSIG), and a front-end ends with the engine process."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys

from sift_server.config import Settings

log = logging.getLogger("sift")

_PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int) -> None:
    """SIGTERM this process when the supervisor dies (Linux); already gone: leave now."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def read_config() -> tuple[Settings, str]:
    config = json.loads(sys.stdin.read())
    return Settings(**config["settings"]), str(config["instance"])


async def engine_main(settings: Settings, instance: str, socks: list[socket.socket]) -> int:
    from sift_server.composition import build_state
    from sift_server.frontend.engine_side import EngineServer
    from sift_server.server import arm_exit_watchdog, limit_malloc_arenas, reclaim_memory_periodically

    limit_malloc_arenas(settings.malloc_arena_max)
    state = build_state(settings)
    state.runtime_instance = instance
    server = EngineServer(state)
    for sock in socks:
        await server.attach(sock)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    trim = loop.create_task(reclaim_memory_periodically(settings.malloc_trim_s))
    loading = loop.create_task(server.load_models())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait([loading, stopping], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if loading.done() and loading.exception() is not None:
        log.error("engine process: loading failed: %s", loading.exception())
        code = 1
    else:
        await stopping
    grace = settings.shutdown_grace_s
    state.draining = True
    arm_exit_watchdog(grace)
    loading.cancel()
    trim.cancel()
    await state.close(grace)
    return code


def frontend_main(settings: Settings, instance: str, sock: socket.socket) -> None:
    from sift_server.frontend.client import EngineLink
    from sift_server.frontend.frontend_state import frontend_app, frontend_state
    from sift_server.server import DrainingServer, arm_exit_watchdog, uvicorn_config

    servers: list[DrainingServer] = []

    def engine_gone() -> None:
        # Nothing can be answered any more: stop serving (waiters already got their error).
        for server in servers:
            server.sift_state.draining = True
            server.should_exit = True
        arm_exit_watchdog(1.0)

    link = EngineLink(on_lost=engine_gone)
    state = frontend_state(settings, link)
    state.runtime_instance = instance
    app = frontend_app(state, link, sock)
    listener = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((settings.host, settings.port))  # uvicorn listens once the app is ready
    server = DrainingServer(uvicorn_config(app, settings), state)
    servers.append(server)
    server.run(sockets=[listener])


def main(argv: list[str]) -> int:
    from sift_server.server import configure_logging, exit_after_drain, hard_exit, run_event_loop, tune_collector

    role, parent, fds = argv[0], int(argv[1]), [int(fd) for fd in argv[2:]]
    end_with_parent(parent)
    settings, instance = read_config()
    configure_logging(settings)
    tune_collector()
    socks = [socket.socket(fileno=fd) for fd in fds]
    if role == "engine":
        code = run_event_loop(engine_main(settings, instance, socks))
        if code:
            hard_exit("engine process failed", lambda _: os._exit(code))
        exit_after_drain()
    frontend_main(settings, instance, socks[0])
    exit_after_drain()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
