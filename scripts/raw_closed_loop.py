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

TEXTS = [f"The quick brown fox jumps over the lazy dog number {i}." for i in range(64)]


def request_bytes(model: str, index: int) -> bytes:
    body = msgpack.packb({"items": [{"text": TEXTS[index % 64]}]})
    head = (
        f"POST /v1/encode/{model} HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
        f"Accept: application/msgpack\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def closed_loop(
    host: str, port: int, model: str, in_flight: int, seconds: float
) -> tuple[int, float, list[float]]:
    requests = [request_bytes(model, i) for i in range(64)]
    count = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client(first: int) -> None:
        nonlocal count
        reader, writer = await asyncio.open_connection(host, port)
        index = first
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            writer.write(requests[index % 64])
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - sent)
            count += 1
            index += in_flight
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(in_flight)))
    return count, time.perf_counter() - started, sorted(latencies)


def main() -> None:
    os.sched_setaffinity(0, {1})
    url, model, in_flight, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    host, port = url.split("//")[1].split(":")
    count, elapsed, latencies = uvloop.run(closed_loop(host, int(port), model, in_flight, seconds))
    cpu = os.times()
    print(
        f"in_flight={in_flight} requests={count} req/s={count / elapsed:.1f} secs={elapsed:.2f} "
        f"p50_ms={latencies[len(latencies) // 2] * 1000:.2f} client_cpu={(cpu.user + cpu.system) / elapsed:.2f}"
    )


if __name__ == "__main__":
    main()
