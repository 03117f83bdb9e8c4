"""How much slower do forwards run when per-request work shares their core?

    taskset -c 0 python experiments/shared_core_forward.py [--rounds 3] [--nice 10]

The server runs its forwards in a thread (at ``--nice``, as ``forward_nice`` sets it) while the
event loop, on the same core, does each request's HTTP, decoding, tokenizing and answer. This
script loads the default model (its ``auto`` backend, one thread), runs a fixed series of
random batches of 1 to 8 texts of the bench's mixed workload from such a thread, and times the
series while another thread wakes ``--rate`` times a second to do ``--work-ms`` of
tokenizing and msgpack encoding (what the loop does per request), interleaved with a quiet
series. It prints microseconds per padded token of the forwards and each thread's share of
the core: a slowdown larger than the other thread's share is interference (preemptions,
caches), not only lost CPU time.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--rates", default="0,100,200", help="wake-ups per second of the other thread")
    parser.add_argument("--work-ms", type=float, default=0.5)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import msgpack

    from sift_bench.ceiling import load_model, runtime_of
    from sift_bench.workload import texts_for
    from sift_server.adapters.base import EncodeTask, Part

    adapter = load_model()
    print(f"backend {runtime_of(adapter)}", flush=True)
    texts = texts_for("mixed", seed=0)
    rng = random.Random(1)
    batches: list[Any] = [adapter.prepare(EncodeTask(rng.sample(texts, rng.randint(1, 8)))) for _ in range(120)]
    padded = sum(len(b.item_costs) * max(b.item_costs) for b in batches)

    def series() -> tuple[float, float]:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), args.nice)
        wall, cpu = time.perf_counter(), time.thread_time()
        for batch in batches:
            adapter.forward([Part(batch, 0, len(batch.item_costs))])
        return time.perf_counter() - wall, time.thread_time() - cpu

    def per_request_work(stop: threading.Event, rate: float, cpu: list[float]) -> None:
        started, count = time.thread_time(), 0
        while not stop.is_set():
            until = time.perf_counter() + args.work_ms / 1000
            while time.perf_counter() < until:
                adapter.prepare(EncodeTask([texts[count % len(texts)]]))
                msgpack.packb([0.1] * 384)
                count += 1
            time.sleep(1 / rate)
        cpu.append(time.thread_time() - started)

    series()  # warm up
    for round_ in range(args.rounds):
        figures = []
        for rate in (float(r) for r in args.rates.split(",")):
            stop, other_cpu = threading.Event(), []
            other = threading.Thread(target=per_request_work, args=(stop, rate, other_cpu)) if rate else None
            if other:
                other.start()
            wall, cpu = series()
            stop.set()
            if other:
                other.join()
            share = other_cpu[0] / wall if other_cpu else 0.0
            figures.append(
                f"{rate:g}/s: {wall / padded * 1e6:.1f} us/token, forward thread {cpu / wall:.2f}, other {share:.2f}"
            )
        print(f"round {round_ + 1}: " + " | ".join(figures), flush=True)


if __name__ == "__main__":
    main()
