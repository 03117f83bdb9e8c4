"""Closed and open loops through the queue path: a worker killed under load,
scaling out with workers, overload (``sift bench cluster kill``, ``scale``,
``scale-model``, ``overload``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sift_bench.client.raw_http import RawConnection
from sift_bench.cluster.common import (
    Setup,
    cpu_by_process,
    hop_figures,
    hops_of,
    live_workers,
    metric,
    pct,
    sleeper_catalog,
    wait_ready,
)


async def closed_loop(
    url: str, model: str, inflight: int, seconds: float, on_tick: Any = None, texts: list[str] | None = None
) -> dict[str, Any]:
    """``inflight`` clients in closed loop for ``seconds``; each sends one text per
    request (``texts`` in turn, else a short "load k n")."""
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    ids: Counter[str] = Counter()
    served: Counter[str] = Counter()
    slow: list[dict[str, Any]] = []
    hops: list[dict[str, float]] = []
    stop = time.monotonic() + seconds
    n = 0

    async def client_loop(k: int) -> None:
        nonlocal n
        connection = RawConnection(url)
        path = f"/v1/encode/{model}"
        while time.monotonic() < stop:
            n += 1
            rid = f"c{k}-{n}"
            t = time.perf_counter()
            r = None
            try:
                r = await connection.post(
                    path,
                    json.dumps({"items": [{"text": texts[n % len(texts)] if texts else f"load {k} {n}"}]}).encode(),
                    {"X-Request-ID": rid, "Accept": "application/json", "Content-Type": "application/json"},
                )
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    hops.append(hops_of(r))
                    ids[r.headers.get("x-request-id", "")] += 1
                    served[r.headers.get("x-sift-worker", "")] += 1
                else:
                    errors[r.headers.get("x-sie-error-code", str(r.status_code))] += 1
                    if r.status_code == 503 and not r.headers.get("retry-after"):
                        errors["503 without Retry-After"] += 1
            except (OSError, asyncio.IncompleteReadError) as exc:
                errors[type(exc).__name__] += 1
            latencies.append(time.perf_counter() - t)
            if latencies[-1] > 1.0 and len(slow) < 5 and r is not None:
                slow.append(
                    {
                        "latency_s": round(latencies[-1], 3),
                        "worker": r.headers.get("x-sift-worker"),
                        "worker_total_ms": r.headers.get("x-total-time"),
                        **hops_of(r),
                    }
                )
        await connection.close()

    tasks = [asyncio.create_task(client_loop(k)) for k in range(inflight)]
    if on_tick is not None:
        await on_tick()
    await asyncio.gather(*tasks)
    return {
        "statuses": dict(statuses),
        "errors": dict(errors),
        "requests": len(latencies),
        "per_s": round(statuses.get(200, 0) / seconds, 1),
        "max_latency_s": round(max(latencies), 3),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "answered_twice": sum(1 for c in ids.values() if c > 1),
        "served_by": dict(sorted(served.items())),
        **hop_figures(hops),
        "queue_p90_ms": round(pct([h["x-sift-queue-time"] for h in hops if "x-sift-queue-time" in h] or [0.0], 0.9), 2),
        "slowest": slow,
    }


def cmd_kill(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="sift-kill-"))
    catalog = sleeper_catalog(folder, args.sleep_ms)
    setup = Setup(folder)
    wargs = [
        "--catalog",
        str(catalog),
        "--model",
        "test/sleeper",
        "--no-calibrate",
        "--ack-wait-s",
        "3",
        "--progress-interval-s",
        "1",
    ]
    try:
        setup.cluster(
            2,
            wargs,
            ["--catalog", str(catalog), "--model", "test/sleeper", "--stream-storage", args.storage],
            None,
            None,
        )
        wait_ready(setup.url, setup.procs[1], "test/sleeper")
        while len(live_workers(setup.nats_url, "test/sleeper")) < 2:
            time.sleep(0.2)
        time.sleep(2)
        victim = setup.procs[2]

        async def kill_later() -> None:
            await asyncio.sleep(args.seconds / 3)
            os.kill(victim.process.pid, signal.SIGKILL)

        out = asyncio.run(closed_loop(setup.url, "test/sleeper", 32, args.seconds, kill_later))
        out["gateway_duplicate_replies_dropped"] = metric(setup.url, "sift_gateway_duplicate_replies_total")
        print(out, flush=True)
        return out
    finally:
        setup.stop()


def measured_closed_loop(
    setup: Setup, model: str, workers: int, args: argparse.Namespace, texts: list[str] | None = None
) -> dict[str, Any]:
    """Once ``workers`` workers of ``model`` are live and settled, the closed loop
    of ``args`` through the gateway, with the CPU each process spent."""
    wait_ready(setup.url, setup.procs[1], model)
    while len(live_workers(setup.nats_url, model)) < workers:
        time.sleep(0.2)
    time.sleep(2)  # let the workers' start-up CPU settle
    before = cpu_by_process(setup.procs)
    out = asyncio.run(closed_loop(setup.url, model, args.inflight, args.seconds, texts=texts))
    after = cpu_by_process(setup.procs)
    # CPU milliseconds each process spent per answered request: is the machine the limit?
    answered = max(1, out["statuses"].get(200, 0))
    out["cpu_ms_per_request"] = {k: round((after[k] - before[k]) * 1000 / answered, 2) for k in after}
    out["cores_used"] = round(sum(after[k] - before[k] for k in after) / args.seconds, 2)
    return out


def cmd_scale(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for workers in args.workers:
        folder = Path(tempfile.mkdtemp(prefix=f"sift-scale{workers}-"))
        catalog = sleeper_catalog(folder, args.sleep_ms)
        setup = Setup(folder)
        os.environ["SIFT_MAX_BATCH_REQUESTS"] = str(args.batch)
        try:
            setup.cluster(
                workers,
                ["--catalog", str(catalog), "--model", "test/sleeper", "--no-calibrate", *args.worker_arg],
                ["--catalog", str(catalog), "--model", "test/sleeper", "--stream-storage", args.storage],
                None,
                None,
            )
            out = measured_closed_loop(setup, "test/sleeper", workers, args)
            result[f"workers{workers}"] = out
            print(workers, out, flush=True)
        finally:
            os.environ.pop("SIFT_MAX_BATCH_REQUESTS", None)
            setup.stop()
    return result


def cmd_scale_model(args: argparse.Namespace) -> dict[str, Any]:
    """The real default model: one worker, then one per core (worker i pinned to
    CPU i), the same closed loop through one gateway; the gateway, nats-server
    and this client are unpinned. Does a second core's worker add throughput?"""
    from sift_bench.workload.texts import texts_for

    model = "sentence-transformers/all-MiniLM-L6-v2"
    texts = texts_for(args.workload)
    cpus = sorted(os.sched_getaffinity(0))
    result: dict[str, Any] = {}
    for workers in args.workers:
        setup = Setup(Path(tempfile.mkdtemp(prefix=f"sift-scale-model{workers}-")))
        try:
            setup.cluster(0, [], ["--model", model, "--stream-storage", args.storage], None, None)
            for i in range(workers):
                cpu = str(cpus[i % len(cpus)])
                setup.add_worker(f"w{i}", ["--model", model, "--torch-threads", "1", *args.worker_arg], cpu)
            out = measured_closed_loop(setup, model, workers, args, texts)
            result[f"workers{workers}"] = out
            print(workers, {k: out[k] for k in ("per_s", "statuses", "served_by", "p50_ms", "cores_used")}, flush=True)
        finally:
            setup.stop()
    return result


async def open_loop(url: str, model: str, rate: float, seconds: float, patience: float) -> dict[str, Any]:
    """Requests at a fixed rate whatever the answers (one connection each); a request
    still unanswered ``patience`` seconds after the last was sent counts as hung."""
    statuses: Counter[str] = Counter()
    latencies: list[float] = []

    async def one(i: int) -> None:
        connection = RawConnection(url)
        t = time.perf_counter()
        try:
            r = await connection.post(
                f"/v1/encode/{model}",
                json.dumps({"items": [{"text": f"overload {i}"}]}).encode(),
                {"Accept": "application/json", "Content-Type": "application/json", "Connection": "close"},
            )
            code = r.headers.get("x-sie-error-code", "")
            key = str(r.status_code) + (f" {code}" if code else "")
            if r.status_code == 503 and not r.headers.get("retry-after"):
                key += " without Retry-After"
            statuses[key] += 1
        except (OSError, asyncio.IncompleteReadError) as exc:
            statuses[type(exc).__name__] += 1
        finally:
            await connection.close()
        latencies.append(time.perf_counter() - t)

    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    _, pending = await asyncio.wait(tasks, timeout=patience)
    for task in pending:
        task.cancel()
    return {
        "sent": len(tasks),
        "answers": dict(sorted(statuses.items())),
        "hung": len(pending),
        "max_latency_s": round(max(latencies), 3) if latencies else None,
        "p50_ms": round(statistics.median(latencies) * 1000, 2) if latencies else None,
    }


def cmd_overload(args: argparse.Namespace) -> dict[str, Any]:
    """4x one worker's capacity through the gateway, open loop: every answer must be
    200 or 503 with Retry-After, and none may hang."""
    folder = Path(tempfile.mkdtemp(prefix="sift-overload-"))
    catalog = sleeper_catalog(folder, args.sleep_ms)
    setup = Setup(folder)
    os.environ["SIFT_MAX_BATCH_REQUESTS"] = str(args.batch)
    capacity = args.batch * 1000 / args.sleep_ms
    gateway = ["--catalog", str(catalog), "--model", "test/sleeper", "--stream-storage", args.storage]
    gateway += ["--stream-max-msgs-per-model", "64", "--request-timeout-s", "10"]
    try:
        setup.cluster(1, ["--catalog", str(catalog), "--model", "test/sleeper", "--no-calibrate"], gateway, None, None)
        wait_ready(setup.url, setup.procs[1], "test/sleeper")
        while not live_workers(setup.nats_url, "test/sleeper"):
            time.sleep(0.2)
        out = asyncio.run(open_loop(setup.url, "test/sleeper", 4 * capacity, args.seconds, patience=30))
        out["rate_per_s"] = 4 * capacity
        print(out, flush=True)
        return out
    finally:
        os.environ.pop("SIFT_MAX_BATCH_REQUESTS", None)
        setup.stop()
