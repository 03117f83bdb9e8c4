"""The child process that converts a transformers folder into a CTranslate2 model
(``ctranslate2.converters.TransformersConverter``, float32), started by
adapters/_ctranslate2.py through adapters/conversion_process.py.

Why a child: the converter loads the whole transformers model with PyTorch and
builds a second, converted copy of its weights: for madlad400-3b a one-off peak of
about twice the weights, and minutes of CPU holding the interpreter's GIL. Here it
runs at nice 19, the backend decision's nice (``registry.deciding``), and the serving
process waits on a pipe without the GIL. Not under ``SCHED_IDLE`` as the decision is:
the decision runs while the model already serves, whereas the model's first load waits
for the conversion, which ``SCHED_IDLE`` would starve for as long as every core is
busy. The child ends with the server (``PR_SET_PDEATHSIG``).

Per request ``(source folder, destination folder)`` it answers ``("ok", None)`` or
``("failed", reason)``; the parent moves the destination into the cache only on
``ok`` (atomically), so a failed or killed conversion leaves no half artifact."""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any


def convert(source: str, destination: str, threads: int) -> None:
    import torch
    from ctranslate2.converters import TransformersConverter

    if threads > 0:  # 0: torch's own default
        torch.set_num_threads(threads)
    TransformersConverter(source).convert(destination, quantization="float32", force=True)


def serve(receive: Connection, send: Connection, config: dict[str, Any]) -> None:
    from sift_server.registry.deciding import DECIDE_NICE, die_with_parent

    die_with_parent(int(config["parent"]))
    os.setpriority(os.PRIO_PROCESS, 0, DECIDE_NICE)
    send.send(("ready", None))
    while True:
        try:
            source, destination = receive.recv()
        except (EOFError, OSError):
            return
        try:
            convert(source, destination, int(config.get("threads", 0)))
            send.send(("ok", None))
        except Exception as exc:  # the conversion's failure is its answer
            send.send(("failed", f"{type(exc).__name__}: {str(exc)[:500]}"))


if __name__ == "__main__":
    from sift_server.adapters.conversion_process import child_connections

    receive, send, config = child_connections(sys.argv)
    serve(receive, send, config)
