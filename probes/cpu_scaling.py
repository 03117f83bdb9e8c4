"""Do this machine's CPUs scale? A single-threaded kernel pinned to CPU 0 alone,
then one copy pinned to each of CPUs 0 and 1 at once; each copy's iterations per
second. Two vCPUs that share one physical core show a per-CPU share near 0.6
together; two real cores near 1.0 (docs/benchmarks/frontends.md).

    .venv/bin/python probes/cpu_scaling.py [--seconds 5]
"""

from __future__ import annotations

import os

# One thread per copy: set before numpy loads its BLAS.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import multiprocessing as mp
import time

import numpy as np


def work(cpu: int, seconds: float, kind: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, {cpu})
    matrix = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if kind == "matmul":
            matrix @ matrix
        else:
            total = 0
            for i in range(10_000):
                total += i
        count += 1
    out.put(count / (time.perf_counter() - start))


def rates(cpus: list[int], seconds: float, kind: str) -> list[float]:
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=work, args=(cpu, seconds, kind, out)) for cpu in cpus]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return [out.get() for _ in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for kind in ("matmul", "python"):
        alone = rates([0], args.seconds, kind)[0]
        both = rates([0, 1], args.seconds, kind)
        print(
            f"{kind}: alone {alone:.0f}/s on CPU 0; together {both[0]:.0f}/s and {both[1]:.0f}/s; "
            f"per-CPU share {min(both) / alone:.2f}, total {sum(both) / alone:.2f}x"
        )


if __name__ == "__main__":
    main()
