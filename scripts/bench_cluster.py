#!/usr/bin/env python
"""Measure the queue path (docs/benchmarks/scaleout.md). Reported, never asserted.

Run from the repository root, each under the shared benchmark lock:
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py latency
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py latency --interleave
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py nats-floor
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py bursts
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py kill
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py scale
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py scale-model --workers 1,2 --inflight 32
  flock /tmp/sift-bench.lock .venv/bin/python scripts/bench_cluster.py overload
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raw_http import RawConnection, RawResponse  # scripts/, beside this file

from sift_server.cluster.hops import STAGES, STAMPS, STAMPS_ENV, parse_stamps
from sift_server.processes import SiftProcess, free_port, spawn, start_nats, wait_port
from sift_server.server import run_event_loop  # as the gateway (uvicorn) and the worker run
from tests.cluster.conftest import live_workers
from tests.cluster.sleeper import write_sleeper_entry

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LAUNCHER = [sys.executable, "-m", "tests.cluster.launch"]
DUAL = [sys.executable, "-m", "tests.cluster.dual"]  # a worker that is also a sift serve
os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(Path.cwd())})


def pinned(cpus: str | None, command: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *command] if cpus else command


def wait_ready(url: str, proc: SiftProcess, model: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(proc.log())
        try:
            r = httpx.post(f"{url}/v1/encode/{model}", json={"items": [{"text": "warm"}]}, timeout=30)
            if r.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"not ready: {proc.log()[-2000:]}")


class Setup:
    """Either a direct sift serve or nats + gateway + workers."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[SiftProcess] = []
        self.nats_url = ""
        self.url = ""

    def direct(self, args: list[str], cpus: str | None) -> None:
        port = free_port()
        proc = spawn("serve", pinned(cpus, [*LAUNCHER, "serve", "--port", str(port), *args]), self.folder / "serve.log")
        self.procs.append(proc)
        self.url = f"http://127.0.0.1:{port}"

    def cluster(
        self,
        workers: int,
        worker_args: list[str],
        gateway_args: list[str],
        worker_cpus: str | None,
        gateway_cpus: str | None,
    ) -> None:
        nats_proc, self.nats_url = start_nats(self.folder)
        self.procs.append(nats_proc)
        port = free_port()
        gateway = spawn(
            "gateway",
            pinned(
                gateway_cpus, [*LAUNCHER, "gateway", "--nats-url", self.nats_url, "--port", str(port), *gateway_args]
            ),
            self.folder / "gateway.log",
        )
        self.procs.append(gateway)
        wait_port(port, gateway, 120)  # the gateway creates the stream with its storage
        for i in range(workers):
            self.add_worker(f"w{i}", worker_args, worker_cpus)
        self.url = f"http://127.0.0.1:{port}"

    def add_worker(self, name: str, args: list[str], cpus: str | None) -> SiftProcess:
        proc = spawn(
            name,
            pinned(cpus, [*LAUNCHER, "worker", "--nats-url", self.nats_url, "--worker-id", name, *args]),
            self.folder / f"{name}.log",
        )
        self.procs.append(proc)
        return proc

    def add_dual(self, name: str, args: list[str], cpus: str | None) -> str:
        """A worker that also serves sift serve's HTTP API from the same models
        (tests/cluster/dual.py); its direct URL."""
        port = free_port()
        command = [*DUAL, "--nats-url", self.nats_url, "--worker-id", name, "--port", str(port), *args]
        self.procs.append(spawn(name, pinned(cpus, command), self.folder / f"{name}.log"))
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=30)


def keep_alive(connections: int) -> httpx.Limits:
    """Keep every connection open between requests. httpx keeps 20 by default: with
    more in flight it closed and reopened connections all the time, and a reopened
    one now and then waited a TCP retransmission (about 1 s) before the gateway
    saw its request (the 1 s stall of the first measurements)."""
    return httpx.Limits(max_connections=connections, max_keepalive_connections=connections)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HOPS = ("x-sift-gateway-time", "x-sift-queue-time", "x-sift-worker-time", "x-total-time")


def hop_figures(rows: list[dict[str, float]]) -> dict[str, float]:
    """p50 of each timing header (ms) over the responses that carried it."""
    out: dict[str, float] = {}
    for name in HOPS:
        values = [r[name] for r in rows if name in r]
        if values:
            out[name.removeprefix("x-").removeprefix("sift-") + "_p50_ms"] = round(statistics.median(values), 3)
    return out


def hops_of(response: httpx.Response | RawResponse) -> dict[str, float]:
    return {name: float(response.headers[name]) for name in HOPS if name in response.headers}


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
        os.environ[STAMPS_ENV] = "1"
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
            env = {**os.environ, "PYTHONPATH": f"{args.compare_src.resolve()}:{Path.cwd()}"}
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
        os.environ.pop(STAMPS_ENV, None)
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
            command = [sys.executable, __file__, "floor-responder", "--nats-url", url, "--floor-kind", kind]
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


async def bursts(
    url: str,
    model: str,
    size: int,
    count: int,
    gap: float,
    tag: str,
    seen: dict[str, dict[str, float]] | None = None,
    client: str = "raw",
) -> None:
    """``count`` bursts of ``size`` requests, ``gap`` seconds apart. ``seen``: per
    request id, the client's send time (perf_counter, the worker trace's clock on
    this machine) and the answer's timing headers.

    ``client="raw"`` (default): one kept-alive connection per request of a burst,
    opened before the first burst, and all the burst's requests written in one
    turn of the loop (well under a millisecond). ``"httpx"``: the earlier rounds'
    client, which on this machine spent 2 to 9 ms of CPU per request and so spread
    a burst of 32 over about 140 ms before the gateway could see it."""
    if client == "httpx":
        async with httpx.AsyncClient(timeout=60, limits=keep_alive(64)) as http:
            for b in range(count):
                await asyncio.sleep(gap)
                ids = [f"{tag}-{size}-{b}-{i}" for i in range(size)]
                sent = time.perf_counter()
                rs: list[Any] = await asyncio.gather(
                    *(
                        http.post(
                            f"{url}/v1/encode/{model}",
                            json={"items": [{"text": f"burst text {b} {i}"}]},
                            headers={"X-Request-ID": rid, "Accept": "application/msgpack"},
                        )
                        for i, rid in enumerate(ids)
                    )
                )
                _check_burst(ids, rs, sent, seen)
        return
    connections = [RawConnection(url) for _ in range(size)]
    await asyncio.gather(*(c.connect() for c in connections))
    path = f"/v1/encode/{model}"
    try:
        for b in range(count):
            await asyncio.sleep(gap)
            ids = [f"{tag}-{size}-{b}-{i}" for i in range(size)]
            bodies = [json.dumps({"items": [{"text": f"burst text {b} {i}"}]}).encode() for i in range(size)]
            sent = time.perf_counter()
            rs = await asyncio.gather(
                *(
                    c.post(
                        path,
                        body,
                        {"X-Request-ID": rid, "Accept": "application/msgpack", "Content-Type": "application/json"},
                    )
                    for c, body, rid in zip(connections, bodies, ids, strict=True)
                )
            )
            _check_burst(ids, rs, sent, seen)
    finally:
        await asyncio.gather(*(c.close() for c in connections))


def _check_burst(ids: list[str], rs: list[Any], sent: float, seen: dict[str, dict[str, float]] | None) -> None:
    assert all(r.status_code == 200 for r in rs), [r.status_code for r in rs]
    if seen is not None:
        for rid, r in zip(ids, rs, strict=True):
            seen[rid] = {"sent": sent, **hops_of(r)}


def forwards_per_burst(trace: Path, prefix: str) -> Counter[int]:
    per: dict[str, set[int]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        for rid in rec["request_ids"]:
            if rid.startswith(prefix):
                per.setdefault(rid.rsplit("-", 1)[0], set()).add(rec["forward_id"])
    return Counter(len(v) for v in per.values())


def split_bursts(trace: Path, prefix: str, seen: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Each burst that ran in more than one forward, request by request (ms from
    the client's send): published at the gateway (the worker's delivery minus the
    queue time), delivered to the worker, admitted; and its forward (id, reason,
    decided). Says whether the gap was in the gateway's publishing or the worker's
    decision."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        for rid, arrived, admitted in zip(rec["request_ids"], rec["arrivals"], rec["admitted"], strict=True):
            if not rid.startswith(prefix) or rid not in seen:
                continue
            hop = seen[rid]
            sent = hop["sent"]
            row = {
                "id": rid.rsplit("-", 1)[1],
                "published": round((arrived - hop.get("x-sift-queue-time", 0.0) / 1000 - sent) * 1000, 2),
                "delivered": round((arrived - sent) * 1000, 2),
                "admitted": round((admitted - sent) * 1000, 2),
                "forward": rec["forward_id"],
                "reason": rec["reason"],
                "decided": round((rec["decided"] - sent) * 1000, 2),
            }
            rows.setdefault(rid.rsplit("-", 1)[0], []).append(row)
    out = []
    for burst, requests in rows.items():
        if len({r["forward"] for r in requests}) > 1:
            out.append({"burst": burst, "requests": sorted(requests, key=lambda r: r["delivered"])})
    return out


def burst_spans(trace: Path, prefix: str, seen: dict[str, dict[str, float]]) -> dict[str, float]:
    """Over all bursts (ms): the spread of the gateway's publishes and of the
    worker's deliveries within a burst, and the widest gap between consecutive
    deliveries (p50 and max over bursts)."""
    delivered: dict[str, list[float]] = {}
    published: dict[str, list[float]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        for rid, arrived in zip(rec["request_ids"], rec["arrivals"], strict=True):
            if rid.startswith(prefix) and rid in seen:
                burst = rid.rsplit("-", 1)[0]
                delivered.setdefault(burst, []).append(arrived)
                published.setdefault(burst, []).append(arrived - seen[rid].get("x-sift-queue-time", 0.0) / 1000)
    out: dict[str, float] = {}
    for name, per in (("publish_span", published), ("delivery_span", delivered)):
        spans = [(max(v) - min(v)) * 1000 for v in per.values()]
        if spans:
            out[f"{name}_p50_ms"] = round(statistics.median(spans), 2)
            out[f"{name}_max_ms"] = round(max(spans), 2)
    gaps = [max((b - a) * 1000 for a, b in itertools.pairwise(sorted(v))) for v in delivered.values() if len(v) > 1]
    if gaps:
        out["widest_delivery_gap_p50_ms"] = round(statistics.median(gaps), 2)
        out["widest_delivery_gap_max_ms"] = round(max(gaps), 2)
    return out


def cmd_bursts(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="sift-bursts-"))
    trace = folder / "trace.jsonl"
    setup = Setup(folder)
    result: dict[str, Any] = {}
    try:
        setup.cluster(
            1, ["--torch-threads", "1", "--trace-file", str(trace)], ["--stream-storage", args.storage], "0", "1"
        )
        wait_ready(setup.url, setup.procs[1], DEFAULT_MODEL)
        os.sched_setaffinity(0, {1})
        for size in (8, 32):
            seen: dict[str, dict[str, float]] = {}
            asyncio.run(bursts(setup.url, DEFAULT_MODEL, size, args.n, 0.25, "burst", seen, args.client))
            hist = forwards_per_burst(trace, f"burst-{size}-")
            result[f"burst{size}"] = {
                "one_forward": hist.get(1, 0),
                "bursts": sum(hist.values()),
                "forwards_histogram": dict(sorted(hist.items())),
                **burst_spans(trace, f"burst-{size}-", seen),
                "split": split_bursts(trace, f"burst-{size}-", seen),
            }
            print(size, json.dumps(result[f"burst{size}"], indent=1), flush=True)
    finally:
        setup.stop()
    return result


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


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(procs: list[SiftProcess]) -> dict[str, float]:
    out = {p.name: cpu_seconds(p.process.pid) for p in procs if p.alive()}
    times = os.times()
    out["client"] = times.user + times.system
    return out


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def sleeper_catalog(folder: Path, sleep_ms: float) -> Path:
    catalog = folder / "catalog"
    write_sleeper_entry(catalog, "test/sleeper", sleep_ms)
    return catalog


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
    from sift_bench.workload import texts_for

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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "what",
        choices=("latency", "bursts", "kill", "scale", "scale-model", "overload", "nats-floor", "floor-responder"),
    )
    p.add_argument("--nats-url", help="floor-responder (internal): the NATS server")
    p.add_argument("--floor-kind", default="core", help="floor-responder (internal): core, memory or file")
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
    args = p.parse_args()
    if args.what == "floor-responder":
        run_event_loop(floor_responder(args.nats_url, "core" if args.floor_kind == "core" else "js"))
        return
    result = globals()[f"cmd_{args.what.replace('-', '_')}"](args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
