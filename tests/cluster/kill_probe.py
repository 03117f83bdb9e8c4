"""``python -m tests.cluster.kill_probe [--runs 5] [--seconds 20]``: the failover
check of issue 23 on the real model. Per run: a local cluster (nats-server, a
gateway, two workers of all-MiniLM-L6-v2 on the packaged weights), 32 clients
in closed loop on the OpenAI route through the gateway, ``kill -9`` of one worker
at a random moment 8-12 s in. Prints one JSON line per run: the statuses from
the kill to the end, the requests in flight at the kill and when the last of
them was answered, and the duplicate replies the gateway dropped.

Run it under ``flock -x /tmp/sift-cpu.lock`` (it is a measurement)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from sift_server.cluster.local import start_local_cluster
from sift_server.config import DEFAULT_MODEL
from sift_server.processes import offline_env
from tests.cluster.conftest import metric, wait_for


async def closed_loop(url: str, clients: int, seconds: float, kill_at: float, kill: Any) -> dict[str, Any]:
    started = time.monotonic()
    killed: list[float] = []
    outcomes: list[tuple[float, float, int, str]] = []  # sent, answered, status, error code

    async def client(k: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            n = 0
            while time.monotonic() - started < seconds:
                n += 1
                sent = time.monotonic()
                try:
                    r = await http.post("/v1/embeddings", json={"model": DEFAULT_MODEL, "input": f"client {k} n {n}"})
                    code = r.headers.get("x-sie-error-code", "") if r.status_code != 200 else ""
                    outcomes.append((sent, time.monotonic(), r.status_code, code))
                except httpx.HTTPError as exc:
                    outcomes.append((sent, time.monotonic(), 0, type(exc).__name__))

    async def killer() -> None:
        await asyncio.sleep(kill_at)
        kill()
        killed.append(time.monotonic())

    await asyncio.gather(killer(), *(client(k) for k in range(clients)))
    at = killed[0]
    after = [o for o in outcomes if o[1] >= at]
    held = [o for o in outcomes if o[0] < at <= o[1]]
    return {
        "requests": len(outcomes),
        "statuses_after_kill": dict(Counter(o[2] for o in after)),
        "errors": dict(Counter(o[3] for o in outcomes if o[2] != 200)),
        "held_at_kill": len(held),
        "last_held_answered_s_after_kill": round(max((o[1] - at for o in held), default=0.0), 2),
        "slowest_s": round(max(o[1] - o[0] for o in outcomes), 2),
    }


def one_run(folder: Path, seconds: float, clients: int, rng: random.Random) -> dict[str, Any]:
    os.environ.update(offline_env({"PYTHONPATH": os.environ.get("PYTHONPATH", "")}))
    worker_args = ["--no-calibrate", "--torch-threads", "1"]
    cluster = start_local_cluster(2, worker_args, [], folder=folder)
    try:

        def ready() -> bool:
            if not all(w.alive() for w in cluster.workers):
                raise RuntimeError("a worker exited:\n" + "\n".join(w.log_tail() for w in cluster.workers))
            got = httpx.get(f"{cluster.url}/v1/models/{DEFAULT_MODEL}", timeout=30)
            return got.status_code == 200 and got.json()["loaded"] is True

        wait_for(ready, "the workers", 300)
        time.sleep(6.0)  # both heartbeats in, start-up CPU settled
        victim = rng.choice(cluster.workers)
        kill_at = rng.uniform(8.0, 12.0)
        out = asyncio.run(
            closed_loop(cluster.url, clients, seconds, kill_at, lambda: os.kill(victim.process.pid, signal.SIGKILL))
        )
        out["kill_at_s"] = round(kill_at, 1)
        out["duplicate_replies_dropped"] = metric(cluster.url, "sift_gateway_duplicate_replies_total")
        return out
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    ok = True
    for index in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix=f"sift-kill-{index}-"))
        out = one_run(folder, args.seconds, args.clients, rng)
        statuses = out["statuses_after_kill"]
        out["met"] = set(statuses) == {200} and out["last_held_answered_s_after_kill"] <= 5.0
        ok = ok and out["met"]
        print(json.dumps({"run": index + 1, **out}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
