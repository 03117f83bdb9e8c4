"""Bursts through the gateway: how many forwards each burst took, and its spans
(``sift bench cluster bursts``)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from sift_bench.client.raw_http import RawConnection
from sift_bench.cluster.common import (
    DEFAULT_MODEL,
    Setup,
    hops_of,
    keep_alive,
    wait_ready,
)


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
    client, whose CPU cost per request spread a burst over a long stretch before
    the gateway could see it (docs/benchmarks/scaleout.md has the figures)."""
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
            row: dict[str, Any] = {
                "id": rid.rsplit("-", 1)[1],
                "published": round((arrived - hop.get("x-sift-queue-time", 0.0) / 1000 - sent) * 1000, 2),
                "delivered": round((arrived - sent) * 1000, 2),
                "admitted": round((admitted - sent) * 1000, 2),
                "forward": rec["forward_id"],
                "reason": rec["reason"],
                "decided": round((rec["decided"] - sent) * 1000, 2),
            }
            rows.setdefault(rid.rsplit("-", 1)[0], []).append(row)
    out: list[dict[str, Any]] = []
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
