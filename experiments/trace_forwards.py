"""What the forwards of a ``sift bench`` run's closed loops looked like, from the servers' traces.

    .venv/bin/python experiments/trace_forwards.py BENCH_OUT_FOLDER

Per arm and closed-loop phase, medians over trials: requests per forward, sub-forwards per
forward, the share of the phase the forward thread was busy, microseconds per real token
(the forward's time over the tokens its requests hold) and items/s. Reads ``results.json``
(or ``results.json.gz``) and each run's trace from ``traces/`` beside it (plain or gzipped).
"""

from __future__ import annotations

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any, TextIO

from sift_server.engine.trace import parse_trace


def _open(path: Path) -> TextIO:
    if path.exists():
        return path.open(encoding="utf-8")
    return gzip.open(path.with_name(path.name + ".gz"), "rt", encoding="utf-8")


def main() -> None:
    folder = Path(sys.argv[1])
    with _open(folder / "results.json") as file:
        results: dict[str, Any] = json.load(file)
    figures: dict[tuple[str, str], list[tuple[float, ...]]] = collections.defaultdict(list)
    for run in results["runs"]:
        with _open(folder / "traces" / Path(run["trace_file"]).name) as file:
            forwards = parse_trace(file)
        for name, phase in run["phases"].items():
            if not name.startswith("closed"):
                continue
            start, end = phase["window_start"], phase["window_end"]
            inside = [f for f in forwards if start <= f.start <= end]
            busy = sum(f.end - f.start for f in inside)
            items = sum(f.items for f in inside)
            tokens = sum(f.cost for f in inside)
            figures[(run["arm"], name)].append(
                (
                    items / len(inside),
                    statistics.mean(f.chunks for f in inside),
                    busy / (end - start),
                    busy / tokens * 1e6,
                    items / (end - start),
                )
            )
    print("arm | phase | requests per forward | sub-forwards | busy | us per token | items/s")
    for (arm, name), rows in sorted(figures.items()):
        medians = [statistics.median(column) for column in zip(*rows, strict=True)]
        size, chunks, busy, per_token, rate = medians
        print(f"{arm} | {name} | {size:.1f} | {chunks:.2f} | {busy:.2f} | {per_token:.0f} | {rate:.1f}")


if __name__ == "__main__":
    main()
