"""Latency p50/p90/p99/max, items/s and requests per forward of each closed-loop
phase of a ``sift bench`` run, per arm and trial, and adaptive / timed per trial.

    .venv/bin/python experiments/closed_loop_distribution.py bench-results/.../results.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STATS = ("items/s", "p50", "p90", "p99", "max")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def phase_row(phase: dict[str, Any]) -> tuple[float, ...]:
    latency = [
        (recv - send) * 1e3 for send, recv, ok in zip(phase["send"], phase["recv"], phase["ok"], strict=True) if ok
    ]
    span = phase["window_end"] - phase["window_start"]
    sizes = {fid: n for fid, n in zip(phase["forward_id"], phase["forward_requests"], strict=True) if fid is not None}
    return (
        len(latency) / span,
        percentile(latency, 50),
        percentile(latency, 90),
        percentile(latency, 99),
        max(latency),
        statistics.mean(sizes.values()) if sizes else math.nan,
    )


def main(path: Path) -> None:
    results = json.loads(path.read_text(encoding="utf-8"))
    rows: dict[tuple[str, str], dict[int, tuple[float, ...]]] = defaultdict(dict)
    for run in results["runs"]:
        for name, phase in run["phases"].items():
            if phase["kind"] == "closed":
                rows[(run["arm"], name)][run["trial"]] = phase_row(phase)
    for (arm, name), trials in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [
            f"t{t}: {r[0]:.1f}/s {r[1]:.0f}/{r[2]:.0f}/{r[3]:.0f}/{r[4]:.0f} ms fwd {r[5]:.1f}"
            for t, r in trials.items()
        ]
        print(f"{name:9s} {arm:9s}", "  ".join(cells))
    for name in sorted({name for _, name in rows}):
        ours, theirs = rows.get(("adaptive", name), {}), rows.get(("timed", name), {})
        paired = sorted(set(ours) & set(theirs))
        for index, label in enumerate(STATS):
            ratios = [ours[t][index] / theirs[t][index] for t in paired]
            if ratios:
                mean = math.exp(statistics.mean(math.log(x) for x in ratios))
                print(
                    f"{name:9s} {label:7s} adaptive/timed", " ".join(f"{x:.3f}" for x in ratios), f"geomean {mean:.3f}"
                )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
