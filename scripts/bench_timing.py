"""The timing loop the in-process benchmarks share (scripts/bench_decoder.py, bench_reranker.py,
bench_m3.py): items/s of every arm at batch 1, 8 and 32, each figure the best of ``rounds``
interleaved rounds over the corpus (every arm once per round, so a busy machine slows them
alike), after one warm call per arm and batch size; the largest difference of each arm's answer
to the library's; and the report, printed and written as JSON with the CPUs it ran on.

The clock is injected, so the loop's arithmetic is tested without timing anything
(tests/bench/test_bench_timing.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Arm = Callable[[list[str]], np.ndarray]
SIZES = (1, 8, 32)


def corpus(words: Sequence[str], count: int) -> list[str]:
    """``count`` texts of 6 to 19 of ``words``, the same on every run."""
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(6 + (i * 5) % 14)) for i in range(count)]


def items_per_second(
    arms: Mapping[str, Arm],
    texts: Sequence[str],
    *,
    rounds: int,
    sizes: Sequence[int] = SIZES,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, dict[str, float]]:
    """``{"batch N": {arm: items/s}}``: the corpus in batches of N, the best of ``rounds``."""
    results: dict[str, dict[str, float]] = {}
    for size in sizes:
        batches = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
        best = dict.fromkeys(arms, float("inf"))
        for call in arms.values():
            call(batches[0])  # warm
        for _ in range(rounds):
            for name, call in arms.items():
                start = clock()
                for batch in batches:
                    call(batch)
                best[name] = min(best[name], clock() - start)
        results[f"batch {size}"] = {name: round(len(texts) / seconds, 1) for name, seconds in best.items()}
    return results


def largest_differences(arms: Mapping[str, Arm], library: Arm, texts: list[str]) -> dict[str, float]:
    """Each arm's largest absolute difference to the library's answer on ``texts``."""
    want = library(texts)
    return {name: float(np.abs(call(texts) - want).max()) for name, call in arms.items()}


def report(results: dict[str, dict[str, float]], path: Path | None, **extra: Any) -> dict[str, Any]:
    """The report (items/s, ``extra``, the CPUs this process may run on), printed and written to ``path``."""
    document = {"items_per_s": results, **extra, "affinity": sorted(os.sched_getaffinity(0))}
    text = json.dumps(document, indent=1)
    print(text)
    if path is not None:
        path.write_text(text + "\n")
    return document
