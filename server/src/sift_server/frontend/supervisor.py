"""``sift serve --frontends N``: one engine process and N front-end processes (each on its
own ``SO_REUSEPORT`` socket of the same port), each front-end joined to the engine by a
socketpair. The supervisor runs no event loop and serves nothing: on SIGTERM or SIGINT it
drains the front-ends first (their requests in flight are answered by the engine), then
the engine; when any child dies, it ends the others. Children end with it (PDEATHSIG)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from sift_server.config import Settings
from sift_server.core.state import runtime_instance_id
from sift_server.registry.catalog import Catalog

log = logging.getLogger("sift")

# How often the supervisor looks at its children.
POLL_S = 0.2
# Past the grace period, how long a child has to exit before it is killed.
KILL_AFTER_S = 5.0


def _spawn(role: str, fds: list[int], config: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "sift_server.frontend.child", role, str(os.getpid()), *map(str, fds)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, pass_fds=fds)
    assert child.stdin is not None
    child.stdin.write(config.encode())
    child.stdin.close()
    return child


def _stop(children: list[subprocess.Popen[bytes]], sig: int, wait_s: float) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(sig)
    ends = time.monotonic() + wait_s
    for child in children:
        try:
            child.wait(max(0.0, ends - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("process %d did not exit in time: killed", child.pid)
            child.kill()
            child.wait()


def refusal(settings: Settings) -> str | None:
    """Why these settings cannot be served split (None: they can)."""
    catalog = Catalog.from_dirs(settings.catalog)
    for name in [settings.default_model, *settings.preload]:
        if name in catalog and "generate" in catalog.specs[name].tasks:
            return f"{name} generates text, which --frontends does not serve (its work is not an engine's submit)"
    return None


def run_split(settings: Settings) -> int:
    """Serve until a signal (0) or a child's death (1); 2 where the settings cannot be served split."""
    refused = refusal(settings)
    if refused is not None:
        print(f"sift: --frontends: {refused}", file=sys.stderr)
        return 2
    count = settings.frontends
    config = json.dumps({"settings": settings.model_dump(mode="json"), "instance": runtime_instance_id()})
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(count)]
    stopping: list[int] = []

    def on_signal(sig: int, frame: FrameType | None) -> None:
        stopping.append(sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    engine = _spawn("engine", [a.fileno() for a, _ in pairs], config)
    fronts = [_spawn("frontend", [b.fileno()], config) for _, b in pairs]
    for a, b in pairs:
        a.close()
        b.close()
    log.info(
        "serving with %d front-end processes (%s) and an engine process (%d)",
        count,
        ", ".join(str(p.pid) for p in fronts),
        engine.pid,
    )
    died: list[subprocess.Popen[bytes]] = []
    while not stopping:
        died = [child for child in [engine, *fronts] if child.poll() is not None]
        if died:
            break
        time.sleep(POLL_S)
    if died:
        log.error("process %d exited (status %s): stopping the others", died[0].pid, died[0].returncode)
    grace = settings.shutdown_grace_s
    # The front-ends first: what they hold in flight is answered by the engine.
    _stop(fronts, signal.SIGTERM, grace + KILL_AFTER_S)
    _stop([engine], signal.SIGTERM, grace + KILL_AFTER_S)
    return 1 if died else 0
