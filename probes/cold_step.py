"""A load step from 0 to ``--clients`` closed-loop clients against a local cluster
with no warm worker, scaled by ``sift cluster``'s local scaler (issue 35, item 3).

The model is the test sleeper (tests/cluster/sleeper.py: a fixed forward time,
no CPU, and a ``--load-ms`` load), so the figures are those of the queue path and
the scaler, not of a model. Passes when every request is answered 200 (none
refused while the workers start) and the pool is back to its minimum after idle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from sift_server.cluster.autoscale import LocalScaler
from sift_server.cluster.cli import SCALE_TICK_S
from sift_server.cluster.local import start_local_cluster
from sift_server.cluster.scaler import ScalePolicy
from tests.cluster.sleeper import write_sleeper_entry

MODEL = "test/step"
LAUNCHER = [sys.executable, "-m", "tests.cluster.launch"]


async def closed_loop(url: str, clients: int, seconds: float) -> list[tuple[float, float, int]]:
    """(sent, answered, status) of every request, in seconds from the step."""
    outcomes: list[tuple[float, float, int]] = []
    start = time.monotonic()
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(index: int) -> None:
            while time.monotonic() - start < seconds:
                sent = time.monotonic() - start
                reply = await client.post(
                    f"{url}/v1/encode/{MODEL}",
                    json={"items": [{"text": f"t {index}"}]},
                    headers={"accept": "application/json"},
                )
                outcomes.append((sent, time.monotonic() - start, reply.status_code))

        await asyncio.gather(*(one(i) for i in range(clients)))
    return outcomes


def steady_from(answered: list[float], seconds: float, window_s: float = 2.0) -> tuple[float, float]:
    """(when throughput first reached 90 % of the last quarter's, that throughput per second)."""
    tail_s = seconds / 4
    rate = sum(1 for t in answered if t > seconds - tail_s) / tail_s
    at = 0.0
    while at < seconds:
        if sum(1 for t in answered if at <= t < at + window_s) / window_s >= 0.9 * rate:
            return at, rate
        at += 0.5
    return seconds, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--backlog-per-worker", type=int, default=16)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--forward-ms", type=float, default=50.0)
    parser.add_argument("--load-ms", type=float, default=2000.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sift-cold-step-"))
    write_sleeper_entry(root / "catalog", MODEL, args.forward_ms, load_ms=args.load_ms)
    os.environ.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[1])})
    flags = ["--catalog", str(root / "catalog"), "--model", MODEL]
    cluster = start_local_cluster(0, [*flags, "--no-calibrate"], flags, folder=root / "cluster", launcher=LAUNCHER)
    policy = ScalePolicy(0, args.max_workers, args.backlog_per_worker, args.idle_s)
    scaler = LocalScaler(cluster, [MODEL], policy)
    wanted: list[int] = []
    stopping = threading.Event()

    def scale() -> None:  # as sift cluster's loop does
        while not stopping.wait(SCALE_TICK_S):
            wanted.append(scaler.tick())

    thread = threading.Thread(target=scale)
    thread.start()
    try:
        outcomes = asyncio.run(closed_loop(cluster.url, args.clients, args.seconds))
        time.sleep(args.idle_s + 3 * SCALE_TICK_S)
    finally:
        stopping.set()
        thread.join()
        scaler.close()
        cluster.stop()
    answered = sorted(end for _, end, status in outcomes if status == 200)
    refused = [status for _, _, status in outcomes if status != 200]
    steady_at, rate = steady_from(answered, args.seconds)
    print(
        f"requests {len(outcomes)}, not 200: {len(refused)} {sorted(set(refused))}; "
        f"first answer {answered[0]:.2f} s after the step; steady ({rate:.0f}/s) from {steady_at:.1f} s; "
        f"workers wanted per {SCALE_TICK_S:g} s tick: max {max(wanted)}, last {wanted[-1]}"
    )
    return 0 if not refused and wanted[-1] == policy.min_workers else 1


if __name__ == "__main__":
    raise SystemExit(main())
