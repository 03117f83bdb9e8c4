"""How tight can the closed-loop tail be on a workload of mixed lengths, whatever the policy?

    taskset -c 0 python experiments/tail_bound.py [--workload mixed] [--waves 200] [--sizes 8,32]

A fixed tail ratio (p99 and max against p50 of client latency, 8 and 32 clients in closed
loop) can only be as tight as the schedule allows. This script measures, in-process on the default model (its ``auto``
backend, one thread), the most favourable schedule a server could run for that ratio: every
client's request of a wave in one batch (full-wave synchronization, what a timed window
achieves at best), run as the server runs a batch (sub-forwards of similar length,
``engine.padding``), with nothing else on the core. Waves are drawn at random from the bench's
workload texts, one text per request, as the bench's clients send them.

Two figures per wave size:

* ``held``: every answer leaves when its wave's last sub-forward ends, so all requests of a
  wave see the same latency and only the spread between waves is left;
* ``early``: each answer leaves when its own sub-forward ends (shortest first, as the engine
  answers).

A client's latency is the wave's time plus a fixed turnaround (``--turnaround-ms``: HTTP both
ways and the client), which only dilutes the ratio.
Lower ratios than ``held`` need answers held past their own wave: making the median request
slower on purpose.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--waves", type=int, default=200)
    parser.add_argument("--sizes", default="8,32")
    parser.add_argument("--turnaround-ms", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from sift_bench.ceiling import fixed_tokens_of, load_model, runtime_of
    from sift_bench.stats import percentile
    from sift_bench.workload import texts_for
    from sift_server.adapters.base import EncodeTask, Part
    from sift_server.engine import padding

    adapter = load_model()
    print(f"backend {runtime_of(adapter)}, workload {args.workload}", flush=True)
    texts = texts_for(args.workload, seed=args.seed)

    def prepare(batch: list[str]) -> Any:
        return adapter.prepare(EncodeTask(batch))

    fixed_tokens = fixed_tokens_of(adapter, prepare, texts)
    rng = random.Random(args.seed)
    turnaround = args.turnaround_ms / 1000
    for size in (int(s) for s in args.sizes.split(",")):
        held: list[float] = []
        early: list[float] = []
        for wave in range(args.waves + 1):
            prepared = prepare(rng.choices(texts, k=size))
            groups = padding.plan(prepared.item_costs, fixed_tokens)
            start = time.perf_counter()
            ends = []
            for group in groups:
                adapter.forward([Part(prepared, i, i + 1) for i in group])
                ends += [time.perf_counter() - start] * len(group)
            if wave == 0:
                continue  # first call at this size
            held += [ends[-1] + turnaround] * size
            early += [end + turnaround for end in ends]
        for name, latencies in (("held", held), ("early", early)):
            p50 = statistics.median(latencies)
            print(
                f"{size} in flight, {name}: p50 {p50 * 1000:.1f} ms, p99/p50 {percentile(latencies, 99) / p50:.2f}, "
                f"max/p50 {max(latencies) / p50:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
