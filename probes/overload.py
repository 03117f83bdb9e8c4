"""Overload at a multiple of capacity: every answer a 200 or a 503 QUEUE_FULL with
Retry-After, and the server's own queue time bounded by its deadline.

Measures capacity first (closed loop, --clients concurrent senders of encode
requests of 1-32 items for --calibrate-s), then sends Poisson arrivals at
--factor x that rate for --duration-s, with --queue-timeout-s on the server.
Reports the answers by status and code, and p50/p99/max of the server's queue
time (X-Queue-Time of the 200s) and of the client's latency.

    .venv/bin/python -m probes.overload [--factor 4] [--duration-s 30] [--queue-timeout-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from probes.common import MINILM, start_server

ENCODE = f"/v1/encode/{MINILM}"
WORDS = "the quick brown fox jumps over a lazy dog while vectors of text drift in space".split()  # noqa: SIM905


def body(rng: random.Random) -> dict[str, object]:
    def text() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))

    return {"items": [{"text": text()} for _ in range(rng.randint(1, 32))]}


@dataclass
class Tally:
    answers: Counter[str] = field(default_factory=Counter)
    queue_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)


async def one(client: httpx.AsyncClient, payload: dict[str, object], tally: Tally) -> None:
    started = time.perf_counter()
    try:
        response = await client.post(ENCODE, json=payload, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        tally.answers[type(exc).__name__] += 1
        tally.bad.append(type(exc).__name__)
        return
    tally.latency_ms.append((time.perf_counter() - started) * 1000)
    code = response.headers.get("x-sie-error-code", "")
    tally.answers[f"{response.status_code} {code}".strip()] += 1
    if response.status_code == 200:
        tally.queue_ms.append(float(response.headers["x-queue-time"]))
    elif not (response.status_code == 503 and code == "QUEUE_FULL" and response.headers.get("retry-after")):
        tally.bad.append(f"{response.status_code} {code} retry-after={response.headers.get('retry-after')}")


async def capacity(client: httpx.AsyncClient, clients: int, seconds: float) -> float:
    """Requests per second the server completes with ``clients`` in flight."""
    rng = random.Random(7)
    done = 0
    deadline = time.perf_counter() + seconds

    async def sender() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            response = await client.post(ENCODE, json=body(rng), headers={"Accept": "application/json"})
            done += response.status_code == 200

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(clients)))
    return done / (time.perf_counter() - started)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) >= 2 else (values[0] if values else 0.0)


async def run(url: str, args: argparse.Namespace) -> tuple[float, Tally]:
    limits = httpx.Limits(max_connections=args.max_in_flight, max_keepalive_connections=args.max_in_flight)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await client.post(ENCODE, json={"items": [{"text": "warm"}]})
        capacity_rate = await capacity(client, args.clients, args.calibrate_s)
        rate = capacity_rate * args.factor
        print(f"capacity {capacity_rate:.1f} requests/s; sending {rate:.1f}/s for {args.duration_s:.0f} s", flush=True)
        rng = random.Random(args.seed)
        tally = Tally()
        tasks: set[asyncio.Task[None]] = set()
        started = time.perf_counter()
        while time.perf_counter() - started < args.duration_s:
            task = asyncio.create_task(one(client, body(rng), tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    return capacity_rate, tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--factor", type=float, default=4.0, help="arrival rate as a multiple of capacity")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--calibrate-s", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8, help="concurrent senders while measuring capacity")
    parser.add_argument("--queue-timeout-s", type=float, default=2.0, help="the server's queue deadline")
    parser.add_argument("--max-in-flight", type=int, default=512, help="client connections at most")
    parser.add_argument("--slack-ms", type=float, default=500.0, help="queue time allowed past the deadline")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with start_server("--queue-timeout-s", str(args.queue_timeout_s)) as server:
        _, tally = asyncio.run(run(server.url, args))
    queue, latency = tally.queue_ms, tally.latency_ms
    print(f"answers {dict(tally.answers)}")
    print(
        f"server queue time (200s) p50 {pct(queue, 50):.0f} ms p99 {pct(queue, 99):.0f} ms "
        f"max {max(queue, default=0):.0f} ms (deadline {args.queue_timeout_s * 1000:.0f} ms)"
    )
    print(
        f"client latency p50 {pct(latency, 50):.0f} ms p99 {pct(latency, 99):.0f} ms "
        f"max {max(latency, default=0):.0f} ms"
    )
    bounded = pct(queue, 99) <= args.queue_timeout_s * 1000 + args.slack_ms
    if tally.bad:
        print(f"unexpected answers: {Counter(tally.bad)}")
    print("PASS" if bounded and not tally.bad else "FAIL")
    return 0 if bounded and not tally.bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
