"""Closed loop on /v1/encode/MODEL with the bench's raw HTTP client; prints requests/s,
latency percentiles, the server's CPU (all processes under ROOT_PID) and the client's own.

    python load.py URL MODEL IN_FLIGHT SECONDS ROOT_PID"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import sys
import time

import msgspec

from sift_bench.client.raw_http import RawConnection

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
    "search",
    "engines",
    "rank",
    "passages",
    "by",
    "meaning",
]


def tree_cpu(root: int) -> float:
    """CPU seconds of ROOT and all its descendants (live ones)."""
    kids: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(name))
        stats[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo.extend(kids.get(pid, []))
    return total


async def main() -> None:
    url, model, flight, seconds, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    rng = random.Random(0)
    bodies = [
        msgspec.json.encode({"items": [{"text": " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))}]})
        for _ in range(64)
    ]
    path = f"/v1/encode/{model}"
    headers = {"content-type": "application/json", "accept": "application/json"}
    latencies: list[float] = []
    stop = time.monotonic() + seconds + 2.0
    measure_from = time.monotonic() + 2.0  # 2 s warm-up

    async def worker(i: int) -> None:
        conn = RawConnection(url)
        k = i
        while time.monotonic() < stop:
            t0 = time.monotonic()
            r = await conn.post(path, bodies[k % 64], headers)
            assert r.status_code == 200, r.content[:200]
            k += flight
            if t0 >= measure_from:
                latencies.append(time.monotonic() - t0)
        await conn.close()

    tasks = [asyncio.create_task(worker(i)) for i in range(flight)]
    await asyncio.sleep(2.0)
    c0, s0, w0 = tree_cpu(root), resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    await asyncio.gather(*tasks)
    c1, s1, w1 = tree_cpu(root), resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    wall = w1 - w0
    lat = sorted(latencies)
    n = len(lat)

    def pct(p: float) -> float:
        return lat[min(n - 1, int(p * n))] * 1000

    client = (s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime) / wall
    server = (c1 - c0) / wall
    rps = n / wall
    print(
        f"in_flight={flight} rps={rps:.0f} server_cores={server:.2f} rps_per_server_core={rps / server:.0f} "
        f"server_us_per_req={server / rps * 1e6:.0f} client_cores={client:.2f} "
        f"p50={pct(0.5):.2f}ms p90={pct(0.9):.2f}ms p99={pct(0.99):.2f}ms max={lat[-1] * 1000:.2f}ms",
        flush=True,
    )


asyncio.run(main())
