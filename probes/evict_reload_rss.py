"""RSS across evict/reload cycles: two models that do not both fit the memory
budget, requested in turn, so each request evicts the other (idle) model and
reloads its own. Reports RSS after each cycle; passes when the last is within
--tolerance of the RSS after the warm-up cycles.

    .venv/bin/python -m probes.evict_reload_rss [--cycles 30] [--warmup 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx

from probes.common import MINILM, rss_mb, second_catalog_entry, start_server

OTHER = "probe/minilm-twin"


def encode_until_served(client: httpx.Client, model: str, deadline_s: float = 120.0) -> int:
    """Requests until 200 (a cold model answers 503 MODEL_LOADING first); returns the 503s seen."""
    refusals = 0
    end = time.perf_counter() + deadline_s
    while time.perf_counter() < end:
        response = client.post(
            f"/v1/encode/{model}", json={"items": [{"text": "cycle"}]}, headers={"Accept": "application/json"}
        )
        if response.status_code == 200:
            return refusals
        if response.status_code != 503:
            raise RuntimeError(f"{model}: {response.status_code} {response.text[:200]}")
        refusals += 1
        time.sleep(0.2)
    raise RuntimeError(f"{model} not served within {deadline_s} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sift-probe-evict-"))
    catalog = second_catalog_entry(work / "catalog", OTHER)
    # MiniLM is about 87 MiB: the budget holds one of the two, never both. Eviction
    # protection of recently used models is off, so every request swaps models.
    os.environ["SIFT_EVICT_IDLE_S"] = "0"
    with (
        start_server("--memory-budget-mb", "130", catalogs=[catalog], workdir=work) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        assert server.process is not None
        pid = server.process.pid
        samples: list[float] = []
        for cycle in range(args.cycles):
            encode_until_served(client, OTHER)
            encode_until_served(client, MINILM)
            samples.append(rss_mb(pid))
            print(f"cycle {cycle + 1:3d}: RSS {samples[-1]:7.1f} MiB", flush=True)
        time.sleep(10)
        idle = rss_mb(pid)
        evictions = server.log_tail(1_000_000).count("evicted model")
    base = samples[min(args.warmup, len(samples)) - 1]
    growth = (samples[-1] - base) / base
    print(
        f"after warm-up (cycle {args.warmup}) {base:.1f} MiB -> cycle {args.cycles} {samples[-1]:.1f} MiB "
        f"({growth:+.1%}); after 10 s idle {idle:.1f} MiB; min {min(samples):.1f} max {max(samples):.1f}; "
        f"{evictions} evictions"
    )
    return 0 if growth <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
