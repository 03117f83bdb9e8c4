"""Steady mixed load (encode of 1-32 items and OpenAI requests, Poisson arrivals
at a fixed rate) for a bounded time; RSS sampled every 10 s. Passes when the
median RSS of the last --window-s is within --tolerance of the median of the
first window after the warm-up.

    .venv/bin/python -m probes.soak [--duration-s 600] [--warmup-s 120] [--rate 20]

Set SIFT_MALLOC_ARENA_MAX=0 SIFT_MALLOC_TRIM_S=0 to compare with glibc's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter

import httpx

from probes.common import MINILM, rss_mb, start_server

WORDS = "the quick brown fox jumps over a lazy dog while vectors of text drift in space".split()  # noqa: SIM905


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))


async def one(client: httpx.AsyncClient, rng: random.Random, statuses: Counter[int | str]) -> None:
    try:
        if rng.random() < 0.3:
            inputs = [text(rng) for _ in range(rng.randint(1, 8))]
            response = await client.post("/v1/embeddings", json={"model": MINILM, "input": inputs})
        else:
            items = [{"text": text(rng)} for _ in range(rng.randint(1, 32))]
            response = await client.post(
                f"/v1/encode/{MINILM}", json={"items": items}, headers={"Accept": "application/json"}
            )
        statuses[response.status_code] += 1
    except httpx.HTTPError as exc:
        statuses[type(exc).__name__] += 1


Samples = list[tuple[float, float]]


async def run(url: str, pid: int, duration_s: float, rate: float, seed: int) -> tuple[Samples, Counter[int | str]]:
    rng = random.Random(seed)
    statuses: Counter[int | str] = Counter()
    samples: list[tuple[float, float]] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        started = time.perf_counter()
        next_sample = 0.0
        tasks: set[asyncio.Task[None]] = set()
        while (elapsed := time.perf_counter() - started) < duration_s:
            if elapsed >= next_sample:
                samples.append((elapsed, rss_mb(pid)))
                print(f"{elapsed:6.0f} s  RSS {samples[-1][1]:7.1f} MiB  {dict(statuses)}", flush=True)
                next_sample += 10.0
            if len(tasks) < 64:
                task = asyncio.create_task(one(client, rng, statuses))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
        samples.append((time.perf_counter() - started, rss_mb(pid)))
    return samples, statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=600)
    parser.add_argument("--warmup-s", type=float, default=120)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second (aim at ~80%% of capacity)")
    parser.add_argument("--window-s", type=float, default=60, help="median RSS over windows this long")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with start_server("--torch-threads", "1") as server:
        assert server.process is not None
        samples, statuses = asyncio.run(run(server.url, server.process.pid, args.duration_s, args.rate, args.seed))
    # Big batches allocate and free hundreds of MB at a time, so single samples
    # swing; compare the median of the first window after warm-up with the last.
    end_s = samples[-1][0]
    first = [rss for t, rss in samples if args.warmup_s <= t < args.warmup_s + args.window_s]
    last = [rss for t, rss in samples if t >= end_s - args.window_s]
    after_warmup, end = statistics.median(first), statistics.median(last)
    growth = (end - after_warmup) / after_warmup
    print(
        f"RSS median {args.warmup_s:.0f}-{args.warmup_s + args.window_s:.0f} s {after_warmup:.1f} MiB -> "
        f"last {args.window_s:.0f} s {end:.1f} MiB ({growth:+.1%}); max {max(r for _, r in samples):.1f} MiB; "
        f"answers {dict(statuses)}"
    )
    return 0 if growth <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
