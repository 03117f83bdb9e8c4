"""The generation engine's process: ``python -m sift_server.generation.engine_child
<fd in> <fd out> <json config>``, started, watched and stopped by engine_process.py.

It builds the pipeline (openvino_engine.py), answers ``("ready", None)`` (or
``("failed", message)``), then loops: it takes every message waiting
(``("add", id, prompt ids, Sampling)``, ``("cancel", id)``; blocking only while nothing
runs), runs one step, and sends what the step made as one ``("made", [(id, ids,
finish), ...])``. A request the engine refuses is ``("refused", id, message)``; a
failed step is ``("broken", message)`` and the end of the process (the pipeline is
unusable). It exits when its input closes or says ``None``: the server stopped the
model, or died."""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sift_server.adapters.conversion_process import child_connections
from sift_server.generation.openvino_engine import PipelineDriver


def serve(receive: Connection, send: Connection, driver: PipelineDriver) -> int:
    """The loop; its exit code (0: told to stop, 1: the pipeline failed)."""
    while True:
        if not driver.busy or receive.poll():
            try:
                message = receive.recv()
            except EOFError:
                return 0
            if message is None:
                return 0
            _handle(message, send, driver)
            continue  # take everything waiting before the next step
        try:
            made = driver.step()
        except Exception as exc:
            send.send(("broken", str(exc)))
            return 1
        if made:
            send.send(("made", made))


def _handle(message: tuple[Any, ...], send: Connection, driver: PipelineDriver) -> None:
    if message[0] == "cancel":
        driver.cancel(message[1])
        return
    _, request_id, prompt_ids, sampling = message
    try:
        driver.add(request_id, prompt_ids, sampling)
    except Exception as exc:  # refused by the engine: this request fails, the others go on
        send.send(("refused", request_id, str(exc)))


def main(argv: list[str]) -> int:
    receive, send, config = child_connections(argv)
    try:
        driver = PipelineDriver(
            Path(config["folder"]),
            threads=config["threads"],
            kv_cache_gib=config["kv_cache_gib"],
            max_sequences=config["max_sequences"],
        )
    except Exception as exc:
        send.send(("failed", f"{type(exc).__name__}: {exc}"))
        return 1
    # Lowered once the model is compiled (a load at full priority): below the server's forward
    # threads, a step gives way to an encode's forward on a shared core (docs/generation.md).
    if config["nice"]:
        os.nice(config["nice"])
    send.send(("ready", None))
    try:
        return serve(receive, send, driver)
    except (BrokenPipeError, ConnectionResetError):  # the server is gone
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
