"""Closed-loop load with raw HTTP/1.1 keep-alive connections: a client cheap enough (about 0.07
of a core at 2,000 requests/s) that the server, not the client, is measured. Pinned to CPU 1.

    raw_closed_loop.py URL MODEL IN_FLIGHT SECONDS

One msgpack encode of one sentence per request."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import msgpack
import uvloop

from sift_bench.raw_http import RawConnection

TEXTS = [f"The quick brown fox jumps over the lazy dog number {i}." for i in range(64)]
HEADERS = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


async def closed_loop(url: str, model: str, in_flight: int, seconds: float) -> tuple[int, float, list[float]]:
    bodies = [msgpack.packb({"items": [{"text": text}]}) for text in TEXTS]
    path = f"/v1/encode/{model}"
    count = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client(first: int) -> None:
        nonlocal count
        connection = RawConnection(url)
        index = first
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            response = await connection.post(path, bodies[index % 64], HEADERS)
            assert response.status_code == 200, (response.status_code, response.content[:200])
            latencies.append(time.perf_counter() - sent)
            count += 1
            index += in_flight
        await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(in_flight)))
    return count, time.perf_counter() - started, sorted(latencies)


def main() -> None:
    os.sched_setaffinity(0, {1})
    url, model, in_flight, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    count, elapsed, latencies = uvloop.run(closed_loop(url, model, in_flight, seconds))
    cpu = os.times()
    print(
        f"in_flight={in_flight} requests={count} req/s={count / elapsed:.1f} secs={elapsed:.2f} "
        f"p50_ms={latencies[len(latencies) // 2] * 1000:.2f} client_cpu={(cpu.user + cpu.system) / elapsed:.2f}"
    )


if __name__ == "__main__":
    main()
