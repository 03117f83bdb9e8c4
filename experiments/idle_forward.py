"""One-item forwards of the default model in-process, fed the way a sequential
client feeds a server: does an idle gap before each forward make it slower?

    taskset -c 0 python experiments/idle_forward.py [--rounds 3] [--gap-ms 5]

Loads the default catalog model as ``sift serve`` would (its ``auto`` backend),
prepares the 256 texts of the bench's mixed workload, and per round prints the
median one-item forward time in five arms, interleaved: back to back; from a
thread; from a thread at nice 10 (as the server's forward thread runs); after
sleeping ``--gap-ms`` (the server's core idles between a sequential client's
requests); after spinning in Python for ``--gap-ms`` (busy, not idle).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from sift_bench.ceiling import load_model, runtime_of
    from sift_bench.workload import texts_for
    from sift_server.adapters.base import EncodeTask, Part

    adapter = load_model()
    print(f"backend {runtime_of(adapter)}", flush=True)
    prepared = [adapter.prepare(EncodeTask([text])) for text in texts_for("mixed", seed=0)]
    gap = args.gap_ms / 1000

    def forwards(before: Callable[[], None] = lambda: None) -> list[float]:
        times = []
        for item in prepared:
            before()
            start = time.perf_counter()
            adapter.forward([Part(item, 0, 1)])
            times.append(time.perf_counter() - start)
        return times

    def spin() -> None:
        until = time.perf_counter() + gap
        while time.perf_counter() < until:
            pass

    def niced() -> list[float]:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        return forwards()

    plain, low = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    forwards()  # warm up
    for round_ in range(args.rounds):
        arms: dict[str, Any] = {
            "back to back": forwards(),
            "thread": plain.submit(forwards).result(),
            "nice-10 thread": low.submit(niced).result(),
            f"after {args.gap_ms:g} ms idle": forwards(lambda: time.sleep(gap)),
            f"after {args.gap_ms:g} ms busy": forwards(spin),
        }
        medians = "; ".join(f"{name} {statistics.median(t) * 1000:.2f} ms" for name, t in arms.items())
        print(f"round {round_ + 1}: {medians}", flush=True)


if __name__ == "__main__":
    main()
