"""``sift bench cluster WHAT``: measure the queue path (docs/benchmarks/scaleout.md).
Reported, never asserted. Run each under the exclusive CPU lock, e.g.
``flock -x /tmp/sift-cpu.lock sift bench cluster latency --interleave``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

WHAT = ("latency", "bursts", "kill", "scale", "scale-model", "overload", "nats-floor")


def _command(what: str) -> Callable[[argparse.Namespace], dict[str, Any]]:
    from sift_bench.cluster import bursts, latency, load

    commands: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "latency": latency.cmd_latency,
        "nats-floor": latency.cmd_nats_floor,
        "bursts": bursts.cmd_bursts,
        "kill": load.cmd_kill,
        "scale": load.cmd_scale,
        "scale-model": load.cmd_scale_model,
        "overload": load.cmd_overload,
    }
    return commands[what]


def run(args: argparse.Namespace) -> int:
    # The processes it starts load models offline, like every bench server.
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    result = _command(args.what)(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


def add_cluster(commands: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = commands.add_parser(
        "cluster", help="measure the queue path (nats-server, gateway, workers)", description=__doc__
    )
    p.add_argument("what", choices=WHAT)
    p.add_argument("--n", type=int, default=200, help="sequential requests / bursts of each size")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--sleep-ms", type=float, default=50.0)
    p.add_argument("--batch", type=int, default=4, help="max requests per forward (scale)")
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--storage", default="memory", choices=("file", "memory"))
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=1, help="latency: gateway runs, each between two direct runs")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="latency: direct and gateway against one worker process (also a sift serve), request by request",
    )
    p.add_argument("--sleeper", action="store_true", help="latency --interleave: the sleeping test model (--sleep-ms)")
    p.add_argument("--gap-ms", type=float, default=50.0, help="latency --interleave, nats-floor: idle gap (ms)")
    p.add_argument("--seed", type=int, default=0, help="latency --interleave: order of each pair")
    p.add_argument(
        "--no-stamps", dest="stamps", action="store_false", help="latency --interleave: no X-Sift-Stamps (stages)"
    )
    p.add_argument("--raw", action="store_true", help="latency --interleave: every request in --out")
    p.add_argument(
        "--compare-src",
        type=Path,
        help="latency --interleave: also a gateway run from this server/src (another revision), interleaved",
    )
    p.add_argument("--gateway-arg", action="append", default=[], help="extra sift gateway flag (repeatable)")
    p.add_argument("--client", default="raw", choices=("raw", "httpx"), help="bursts: the load generator")
    p.add_argument("--workload", default="sentences", choices=("short", "sentences", "mixed"), help="scale-model texts")
    p.add_argument("--worker-arg", action="append", default=[], help="extra sift worker flag (repeatable)")
    p.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 4])
    p.set_defaults(handler=run)
    return p
