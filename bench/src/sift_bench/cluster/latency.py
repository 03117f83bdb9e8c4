"""Lone-request latency through the queue path against a direct server, and the
NATS floor under it (``sift bench cluster latency``, ``nats-floor``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from sift_bench.client.raw_http import RawConnection
from sift_bench.cluster.common import (
    DEFAULT_MODEL,
    LAUNCHER,
    Setup,
    hop_figures,
    hops_of,
    pct,
    pinned,
    sleeper_catalog,
    wait_ready,
)
from sift_server.cluster.hops import STAGES, STAMPS, parse_stamps
from sift_server.config.settings import variable
from sift_server.processes import free_port, spawn, start_nats
from sift_server.server import run_event_loop  # as the gateway (uvicorn) and the worker run


async def sequential(url: str, model: str, n: int, hops: list[dict[str, float]] | None = None) -> list[float]:
    out = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(n):
            t = time.perf_counter()
            r = await client.post(
                f"{url}/v1/encode/{model}",
                json={"items": [{"text": f"a lone request {i}"}]},
                headers={"Accept": "application/msgpack"},
            )
            out.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.text
            if hops is not None:
                hops.append(hops_of(r))
            await asyncio.sleep(0.05)
    return out


def bootstrap_interval(
    pairs: list[tuple[float, float]], statistic: Any, draws: int = 2000, seed: int = 1
) -> tuple[float, float]:
    """95 % percentile bootstrap interval of ``statistic(pairs)``, resampling pairs."""
    rng = random.Random(seed)
    values = sorted(statistic(rng.choices(pairs, k=len(pairs))) for _ in range(draws))
    return values[int(0.025 * draws)], values[int(0.975 * draws) - 1]


def p50_difference(pairs: list[tuple[float, float]]) -> float:
    """p50 through the gateway minus p50 direct."""
    return statistics.median(g for _, g in pairs) - statistics.median(d for d, _ in pairs)


def median_paired_difference(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(g - d for d, g in pairs)


# The gateway path's stages (from the X-Sift-Stamps of each answer), as (name, from, to).
HOP_STAGES = [
    ("client -> gateway route", "c_send", "g_start"),
    *((f"{a} -> {b}", a, b) for a, b in itertools.pairwise(s for s in STAGES if s not in ("g_published", "g_acked"))),
    ("gateway answer -> client", "g_answer", "c_recv"),
]
# Off the critical path or overlapping it: reported, not summed.
SIDE_STAGES = [
    ("publish call (g_publish -> g_published)", "g_publish", "g_published"),
    ("publish ack (g_publish -> g_acked)", "g_publish", "g_acked"),
]


def stage_figures(stamped: list[dict[str, float]]) -> dict[str, Any]:
    """Median of each stage (ms) over the answers that carried both its stamps."""
    out: dict[str, Any] = {}
    for name, a, b in [*HOP_STAGES, *SIDE_STAGES]:
        values = [(r[b] - r[a]) * 1000 for r in stamped if a in r and b in r]
        if values:
            out[name] = round(statistics.median(values), 3)
    out["sum of the critical stages' medians"] = round(sum(out.get(n, 0.0) for n, _, _ in HOP_STAGES), 3)
    return out


async def interleaved(urls: dict[str, str], model: str, n: int, gap: float, seed: int) -> list[dict[str, Any]]:
    """``n`` rounds of lone requests, one to each of ``urls`` (direct, gateway, ...)
    in a random order within each round, ``gap`` seconds between any two requests:
    the same text for all requests of a round; one kept-alive connection to each."""
    rng = random.Random(seed)
    connections = {kind: RawConnection(url) for kind, url in urls.items()}
    await asyncio.gather(*(c.connect() for c in connections.values()))
    path = f"/v1/encode/{model}"
    headers = {"Accept": "application/msgpack", "Content-Type": "application/json"}
    rows: list[dict[str, Any]] = []
    try:
        for i in range(n):
            body = json.dumps({"items": [{"text": f"a lone request {i}"}]}).encode()
            for kind in rng.sample(list(connections), len(connections)):
                await asyncio.sleep(gap)
                sent = time.perf_counter()
                r = await connections[kind].post(path, body, headers)
                received = time.perf_counter()
                assert r.status_code == 200, (r.status_code, r.content[:200])
                stamps = {"c_send": sent, "c_recv": received, **parse_stamps(r.headers.get(STAMPS.lower()))}
                rows.append({"pair": i, "kind": kind, "ms": (received - sent) * 1000, "stamps": stamps, **hops_of(r)})
    finally:
        await asyncio.gather(*(c.close() for c in connections.values()))
    return rows


def paired_figures(rows: list[dict[str, Any]], base: str, other: str) -> dict[str, Any]:
    """``other`` against ``base``, round by round: p50 each, the difference of the
    p50s and the median paired difference (ms), each with its bootstrap interval."""
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["pair"], {})[row["kind"]] = row["ms"]
    pairs = [(r[base], r[other]) for r in by_round.values() if base in r and other in r]
    low, high = bootstrap_interval(pairs, p50_difference)
    paired_low, paired_high = bootstrap_interval(pairs, median_paired_difference)
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    return {
        "pairs": len(pairs),
        base: {"p50_ms": round(statistics.median(a), 3), "p90_ms": round(pct(a, 0.9), 3)},
        other: {"p50_ms": round(statistics.median(b), 3), "p90_ms": round(pct(b, 0.9), 3)},
        "added_p50_ms": round(p50_difference(pairs), 3),
        "added_p50_ci95_ms": [round(low, 3), round(high, 3)],
        "median_paired_difference_ms": round(median_paired_difference(pairs), 3),
        "median_paired_difference_ci95_ms": [round(paired_low, 3), round(paired_high, 3)],
    }


def latency_interleaved(args: argparse.Namespace) -> dict[str, Any]:
    """Direct and gateway against one process (a worker that is also a sift serve,
    on CPU 0), request by request; the gateway on CPU 1 with this client. With
    ``--compare-src``, a second gateway ("gateway-b") run from another revision's
    server/src joins the rotation, against the same worker."""
    folder = Path(tempfile.mkdtemp(prefix="sift-lat-interleaved-"))
    setup = Setup(folder)
    if args.stamps:
        os.environ[variable("hop_stamps")] = "1"
    model, worker_args = DEFAULT_MODEL, ["--torch-threads", "1"]
    gateway_args = ["--stream-storage", args.storage, *args.gateway_arg]
    if args.sleeper:
        catalog = sleeper_catalog(folder, args.sleep_ms)
        model, worker_args = "test/sleeper", ["--catalog", str(catalog), "--model", "test/sleeper", "--no-calibrate"]
        gateway_args += ["--catalog", str(catalog), "--model", "test/sleeper"]
    try:
        setup.cluster(0, [], gateway_args, None, "1")
        urls = {"direct": setup.add_dual("w0", [*worker_args, *args.worker_arg], "0"), "gateway": setup.url}
        if args.compare_src:
            port = free_port()
            env = {**os.environ, "PYTHONPATH": f"{args.compare_src.resolve()}:{os.environ.get('PYTHONPATH', '')}"}
            command = [*LAUNCHER, "gateway", "--nats-url", setup.nats_url, "--port", str(port), *gateway_args]
            setup.procs.append(spawn("gateway-b", pinned("1", command), folder / "gateway-b.log", env=env))
            urls["gateway-b"] = f"http://127.0.0.1:{port}"
        wait_ready(urls["direct"], setup.procs[2], model)
        for kind in ("gateway", "gateway-b"):
            if kind in urls:
                wait_ready(urls[kind], setup.procs[1 if kind == "gateway" else -1], model)
        os.sched_setaffinity(0, {1})
        asyncio.run(interleaved(urls, model, 20, args.gap_ms / 1000, args.seed + 1))  # warm-up
        rows = asyncio.run(interleaved(urls, model, args.n, args.gap_ms / 1000, args.seed))
        os.sched_setaffinity(0, {0, 1})
    finally:
        os.environ.pop(variable("hop_stamps"), None)
        setup.stop()

    def route(kind: str) -> float | None:
        times = [r["x-total-time"] for r in rows if r["kind"] == kind and "x-total-time" in r]
        return round(statistics.median(times), 3) if times else None

    result: dict[str, Any] = {
        "model": model,
        **paired_figures(rows, "direct", "gateway"),
        # The same route and forward on both paths: does the worker's copy run as fast?
        "route_p50_ms": {"direct": route("direct"), "through_gateway": route("gateway")},
        "direct_client_minus_route_p50_ms": round(
            statistics.median(r["ms"] - r["x-total-time"] for r in rows if r["kind"] == "direct"), 3
        ),
        "gateway_stages_p50_ms": stage_figures([r["stamps"] for r in rows if r["kind"] == "gateway"]),
    }
    if "gateway-b" in urls:
        result["compare"] = {
            "src": str(args.compare_src),
            "gateway_b_vs_direct": paired_figures(rows, "direct", "gateway-b"),
            "gateway_vs_gateway_b": paired_figures(rows, "gateway-b", "gateway"),
            "gateway_b_stages_p50_ms": stage_figures([r["stamps"] for r in rows if r["kind"] == "gateway-b"]),
        }
    print(json.dumps(result, indent=1), flush=True)
    result["raw"] = rows if args.raw else None
    return result


FLOOR_STREAM = "FLOOR"


async def floor_responder(url: str, kind: str) -> None:
    """The far side of ``nats-floor`` (its own process, on CPU 0): answer each
    request with a core NATS publish, as a worker replies, and nothing else."""
    import nats

    nc = await nats.connect(url)
    if kind == "core":

        async def answer(msg: Any) -> None:
            await nc.publish(msg.reply, msg.data)

        await nc.subscribe("floor.core", cb=answer)
    else:
        inbox = nc.new_inbox()
        pull = f"$JS.API.CONSUMER.MSG.NEXT.{FLOOR_STREAM}.floor"
        request = json.dumps({"batch": 1, "expires": int(5e9)}).encode()

        async def delivered(msg: Any) -> None:
            if msg.headers and msg.headers.get("Status") and not msg.data:
                await nc.publish(pull, request, reply=inbox)  # expired: ask again
                return
            await nc.publish(msg.headers["Floor-Reply"], msg.data)
            await msg.ack()
            await nc.publish(pull, request, reply=inbox)

        await nc.subscribe(inbox, cb=delivered)
        for _ in range(4):
            await nc.publish(pull, request, reply=inbox)
    print("ready", flush=True)
    await asyncio.sleep(3600)


async def floor_requests(url: str, kind: str, n: int, gap: float) -> list[float]:
    """``n`` lone round trips (ms), ``gap`` seconds apart: a core request/reply, or a
    JetStream publish (awaiting its ack, as the gateway did) whose reply comes from
    the pulling responder."""
    import nats

    nc = await nats.connect(url)
    out = []
    if kind == "core":
        for _ in range(n):
            await asyncio.sleep(gap)
            t = time.perf_counter()
            await nc.request("floor.core", b"x" * 200, timeout=5)
            out.append((time.perf_counter() - t) * 1000)
    else:
        js = nc.jetstream()
        waiting: list[asyncio.Future[float]] = []

        async def replied(msg: Any) -> None:
            waiting[-1].set_result(time.perf_counter())

        await nc.subscribe("floor.reply", cb=replied)
        for i in range(n):
            await asyncio.sleep(gap)
            waiting.append(asyncio.get_running_loop().create_future())
            t = time.perf_counter()
            await js.publish("floor.js", b"x" * 200, headers={"Floor-Reply": "floor.reply", "Nats-Msg-Id": f"{t}-{i}"})
            out.append((await waiting[-1] - t) * 1000)
    await nc.close()
    return out


def cmd_nats_floor(args: argparse.Namespace) -> dict[str, Any]:
    """The NATS part of the hop alone, with the gateway's and worker's client
    (nats-py) and pinning: a requester on CPU 1 (this process), a responder on
    CPU 0, nats-server unpinned. What no change inside Sift can go below."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

    folder = Path(tempfile.mkdtemp(prefix="sift-nats-floor-"))
    nats_proc, url = start_nats(folder)
    result: dict[str, Any] = {}
    try:
        for kind in ("core", "memory", "file"):
            if kind != "core":

                async def make_stream(storage: str = kind) -> None:
                    nc = await nats.connect(url)
                    js = nc.jetstream()
                    with contextlib.suppress(Exception):
                        await js.delete_stream(FLOOR_STREAM)
                    await js.add_stream(
                        StreamConfig(
                            name=FLOOR_STREAM,
                            subjects=["floor.js"],
                            retention=RetentionPolicy.WORK_QUEUE,
                            storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
                            duplicate_window=120.0,
                        )
                    )
                    await js.add_consumer(
                        FLOOR_STREAM,
                        ConsumerConfig(durable_name="floor", ack_policy=AckPolicy.EXPLICIT, max_waiting=512),
                    )
                    await nc.close()

                asyncio.run(make_stream())
            command = [sys.executable, "-m", "sift_bench.cluster.latency", url, kind]
            responder = spawn("responder", pinned("0", command), folder / f"responder-{kind}.log")
            try:
                while "ready" not in responder.log():
                    if not responder.alive():
                        raise RuntimeError(responder.log())
                    time.sleep(0.05)
                os.sched_setaffinity(0, {1})
                rtt = run_event_loop(floor_requests(url, kind, args.n + 20, args.gap_ms / 1000))[20:]
                os.sched_setaffinity(0, {0, 1})
            finally:
                responder.stop(timeout=5)
            name = "core_request_reply" if kind == "core" else f"jetstream_{kind}_publish_ack_pull_reply"
            result[name] = {"p50_ms": round(statistics.median(rtt), 3), "p90_ms": round(pct(rtt, 0.9), 3)}
            print(name, result[name], flush=True)
    finally:
        nats_proc.stop(timeout=10)
    return result


def cmd_latency(args: argparse.Namespace) -> dict[str, Any]:
    if args.interleave:
        return latency_interleaved(args)
    result: dict[str, Any] = {}
    base = ["--torch-threads", "1"]
    # direct, gateway, direct, gateway, ..., direct: each gateway run between two direct ones.
    kinds = ["direct", *(["gateway", "direct"] * args.rounds)]
    for kind in kinds:
        folder = Path(tempfile.mkdtemp(prefix=f"sift-lat-{kind}-"))
        setup = Setup(folder)
        try:
            if kind == "direct":
                setup.direct(base, "0")
                wait_ready(setup.url, setup.procs[0], DEFAULT_MODEL)
            else:
                setup.cluster(1, base, ["--stream-storage", args.storage], "0", "1")
                wait_ready(setup.url, setup.procs[1], DEFAULT_MODEL)
            os.sched_setaffinity(0, {1})
            asyncio.run(sequential(setup.url, DEFAULT_MODEL, 20))
            hops: list[dict[str, float]] = []
            lat = asyncio.run(sequential(setup.url, DEFAULT_MODEL, args.n, hops))
            os.sched_setaffinity(0, {0, 1})
            entry = {"p50_ms": round(statistics.median(lat), 3), "p90_ms": round(pct(lat, 0.9), 3), "n": len(lat)}
            entry.update(hop_figures(hops))
            result.setdefault(kind, []).append(entry)
            print(kind, entry, flush=True)
        finally:
            setup.stop()
    # Each gateway run against the mean of the direct runs either side of it.
    direct, gateway = result["direct"], result["gateway"]
    added = [g["p50_ms"] - (direct[i]["p50_ms"] + direct[i + 1]["p50_ms"]) / 2 for i, g in enumerate(gateway)]
    result["added_p50_ms"] = [round(a, 3) for a in added]
    result["added_p50_ms_median"] = round(statistics.median(added), 3)
    hop = [g.get("gateway-time_p50_ms", 0.0) - g.get("worker-time_p50_ms", 0.0) for g in gateway]
    result["hop_p50_ms"] = [round(h, 3) for h in hop]  # gateway time minus worker time: queue + gateway + reply
    print("added p50 (ms):", result["added_p50_ms"], "median", result["added_p50_ms_median"], flush=True)
    return result


if __name__ == "__main__":
    # The responder of ``nats-floor``, in a process of its own: NATS_URL KIND.
    run_event_loop(floor_responder(sys.argv[1], "core" if sys.argv[2] == "core" else "js"))
