"""``python -m sift_bench.cluster.dual <sift worker args> --port P``: one process that is
both a ``sift worker`` and a ``sift serve`` on port P, sharing one registry, one
model and one batching engine (benchmarks only).

``sift bench cluster latency --interleave`` sends each lone request either
to this process's HTTP port (direct) or through the gateway (which publishes it
to this same process's work queue), alternating request by request, so the two
paths are measured against the same loaded model, the same engine and the same
moment of the machine's load: their difference is the hop and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from sift_bench.cluster.sleeper import register


async def run(argv: Sequence[str]) -> int:
    from sift_server.api.app import create_app
    from sift_server.cluster.cli import worker_setup
    from sift_server.cluster.worker import StreamWorker, served_models
    from sift_server.config.flags import COMMAND_GROUPS, add_setting_flags
    from sift_server.server import DrainingServer, configure_logging, uvicorn_config

    # sift worker's settings and the HTTP server's (--host, --port, ...).
    groups = (*COMMAND_GROUPS["worker"], "server")
    parser = argparse.ArgumentParser(prog="dual")
    add_setting_flags(parser, groups)
    setup = worker_setup(parser.parse_args(argv), groups)
    if setup is None:
        return 2
    settings, options = setup
    configure_logging(settings)
    worker = StreamWorker(settings, options, served_models(settings))
    running = asyncio.ensure_future(worker.run())
    while not worker.pullers and not running.done():
        await asyncio.sleep(0.05)  # models loaded, consumers joined
    if running.done():
        return int(bool(running.exception()))
    # sift serve's own app and server on the same state (its lifespan finds the models loaded).
    server = DrainingServer(uvicorn_config(create_app(worker.state), settings), worker.state)
    serving = asyncio.ensure_future(server.serve())
    # SIGTERM reaches whichever of the two installed its handler last: stop the other too.
    await asyncio.wait([serving, running], return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    worker.stop()
    await asyncio.gather(serving, running, return_exceptions=True)
    return 0


def main(argv: Sequence[str]) -> int:
    from sift_server.server import run_event_loop, tune_collector

    register()
    tune_collector()  # as sift serve and sift worker do
    return run_event_loop(run(argv))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
