"""The server's own cost per request (issue 20): closed-loop load of one-sentence requests
(5 to 40 words) on one route, through the benchmarks' raw HTTP/1.1 client pinned to CPU 1.

    request_cost.py URL MODEL ROUTE IN_FLIGHT SECONDS [SERVER_PID]     ROUTE: json, msgpack or openai

Prints requests/s, the median latency and the client's own core use (keep it under 0.9:
above that the client, not the server, is measured). With the server's process id, also the
server's CPU time per request (all its threads, from /proc): less noisy than requests/s on a
shared machine, where other jobs take the server's core for part of the run."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time

import msgpack
import uvloop

from sift_bench.raw_http import RawConnection

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "bright",
    "stars",
    "fall",
    "into",
    "quiet",
    "water",
]


def sentences(count: int = 64, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) for _ in range(count)]


def requests(route: str, model: str) -> tuple[str, list[bytes], dict[str, str]]:
    texts = sentences()
    if route == "json":
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        return f"/v1/encode/{model}", [json.dumps({"items": [{"text": t}]}).encode() for t in texts], headers
    if route == "msgpack":
        headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
        return f"/v1/encode/{model}", [msgpack.packb({"items": [{"text": t}]}) for t in texts], headers
    if route == "openai":
        headers = {"Content-Type": "application/json"}
        return "/v1/embeddings", [json.dumps({"model": model, "input": t}).encode() for t in texts], headers
    raise SystemExit(f"unknown route {route!r}: json, msgpack or openai")


async def closed_loop(url: str, model: str, route: str, in_flight: int, seconds: float) -> tuple[int, float, float]:
    path, bodies, headers = requests(route, model)
    count = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client(first: int) -> None:
        nonlocal count
        connection = RawConnection(url)
        index = first
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            response = await connection.post(path, bodies[index % len(bodies)], headers)
            assert response.status_code == 200, (response.status_code, response.content[:200])
            latencies.append(time.perf_counter() - sent)
            count += 1
            index += in_flight
        await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(in_flight)))
    latencies.sort()
    return count, time.perf_counter() - started, latencies[len(latencies) // 2]


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    # REQUEST_COST_CLIENT_CPUS: the client's CPUs (default 1; "none": unpinned, the whole box).
    cpus = os.environ.get("REQUEST_COST_CLIENT_CPUS", "1")
    if cpus != "none":
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    url, model, route, in_flight, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    server = int(sys.argv[6]) if len(sys.argv) > 6 else None
    before = os.times()
    server_before = process_cpu_s(server) if server is not None else 0.0
    count, elapsed, p50 = uvloop.run(closed_loop(url, model, route, in_flight, seconds))
    after = os.times()
    cpu = (after.user - before.user + after.system - before.system) / elapsed
    line = (
        f"route={route} in_flight={in_flight} requests={count} req/s={count / elapsed:.1f} "
        f"p50_ms={p50 * 1000:.2f} client_cpu={cpu:.2f}"
    )
    if server is not None:
        server_cpu = process_cpu_s(server) - server_before
        line += f" server_cpu={server_cpu / elapsed:.2f} server_us_per_req={server_cpu / max(count, 1) * 1e6:.0f}"
    print(line)


if __name__ == "__main__":
    main()
