"""``sift overhead``: what the server adds on top of the model.

Measures, for one model: cold start (process spawn to ``/readyz``), resident
memory once ready, sequential HTTP latency of a one-sentence encode (client
pinned to its own core, nearest-rank p50/p95), the server's own queue time
from the trace, and the in-process ``prepare + forward`` of the same sentence
on the server's core. The difference of the medians is the server's overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import msgpack

from sift_bench.arms.server import add_measurement_args, default_cpus, measured_server
from sift_bench.report.stats import percentile
from sift_server.config import DEFAULT_MODEL

SENTENCE = "The quick brown fox jumps over the lazy dog."


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _http_latencies(url: str, model: str, requests: int) -> tuple[list[float], list[float]]:
    body = msgpack.packb({"items": [{"text": SENTENCE}]})
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    latencies, queue = [], []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(requests + 20):
            start = time.perf_counter()
            response = client.post(f"/v1/encode/{model}", content=body, headers=headers)
            elapsed = time.perf_counter() - start
            response.raise_for_status()
            if i >= 20:  # the first requests warm caches and connections
                latencies.append(elapsed)
                queue.append(float(response.headers["X-Queue-Time"]) / 1000)
    return latencies, queue


def _in_process(model: str, catalogs: Sequence[Path], cpus: set[int] | None, requests: int) -> list[float]:
    from sift_bench.run.ceiling import load_model
    from sift_server.adapters.base import EncodeTask, Part

    if cpus:
        os.sched_setaffinity(0, cpus)
    adapter = load_model(model, catalogs, torch_threads=1)
    times = []
    for i in range(requests + 20):
        start = time.perf_counter()
        prepared = adapter.prepare(EncodeTask([SENTENCE]))
        adapter.forward([Part(prepared, 0, 1)])
        if i >= 20:
            times.append(time.perf_counter() - start)
    return times


def measure(
    model: str, catalogs: Sequence[Path], requests: int, server_cpus: set[int] | None, client_cpus: set[int] | None
) -> dict[str, Any]:
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    with measured_server(model, catalogs, server_cpus) as server:
        assert server.process is not None
        cold_start = server.startup_s
        rss_ready = _rss_mib(server.process.pid)
        latencies, queue = _http_latencies(server.url, model, requests)
        rss_after = _rss_mib(server.process.pid)
    forward = _in_process(model, catalogs, server_cpus, requests)
    http_p50, forward_p50 = percentile(latencies, 50), percentile(forward, 50)
    return {
        "model": model,
        "requests": requests,
        "cold_start_s": cold_start,
        "rss_mib_ready": rss_ready,
        "rss_mib_after_load": rss_after,
        "http_p50_ms": http_p50 * 1000,
        "http_p95_ms": percentile(latencies, 95) * 1000,
        "server_queue_p50_ms": percentile(queue, 50) * 1000,
        "server_queue_p95_ms": percentile(queue, 95) * 1000,
        "in_process_p50_ms": forward_p50 * 1000,
        "overhead_p50_ms": (http_p50 - forward_p50) * 1000,
    }


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("overhead", help="Measure cold start, memory and per-request server overhead.")
    p.add_argument("--model", default=DEFAULT_MODEL)
    add_measurement_args(p, requests=200)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    figures = measure(args.model, args.catalog, args.requests, *default_cpus(args.server_cpus, args.client_cpus))
    for key, value in figures.items():
        print(f"{key:>22}  {value:.2f}" if isinstance(value, float) else f"{key:>22}  {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0
