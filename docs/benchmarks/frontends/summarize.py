"""Summarize interleaved.sh's output: per arm, the median over cycles of requests/s, server
cores, requests/s per server core and each percentile, and the per-cycle ratio of requests/s
per server core to the pinned single process of the same cycle (median, min-max).

    python summarize.py OUTPUT.txt"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict

rows: dict[str, list[dict[str, float]]] = defaultdict(list)
cycles: list[dict[str, dict[str, float]]] = []
for line in open(sys.argv[1]):
    if line.startswith("cycle"):
        cycles.append({})
        continue
    name, sep, rest = line.partition(": in_flight")
    if not sep or not cycles:
        continue
    values = {k: float(v.rstrip("ms")) for k, v in re.findall(r"(\w+)=([\d.]+(?:ms)?)", "in_flight" + rest)}
    rows[name.strip()].append(values)
    cycles[-1][name.strip()] = values

base = next(iter(rows))
print(f"{len(cycles)} cycles; ratios against '{base}' in the same cycle")
print("| arm | requests/s | server cores | requests/s per server core | ratio to pinned (median, min-max) | server µs/request | p50 / p90 / p99 / max ms |")
print("|---|---:|---:|---:|---|---:|---|")
for name, samples in rows.items():
    med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    ratios = [c[name]["rps_per_server_core"] / c[base]["rps_per_server_core"] for c in cycles if name in c and base in c]
    ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    print(
        f"| {name} | {med['rps']:.0f} | {med['server_cores']:.2f} | {med['rps_per_server_core']:.0f} | {ratio} | "
        f"{med['server_us_per_req']:.0f} | {med['p50']:.1f} / {med['p90']:.1f} / {med['p99']:.1f} / {med['max']:.1f} |"
    )
