"""Summary of round6_ab.sh's lines: per in-flight level, each arm's requests/s, server CPU per
request and latency percentiles (medians over rounds), and the ratios of the per-round figures
(geometric mean, 95 % t-interval over rounds) of every arm against the floor and against the first
Sift arm.   python round6_summary.py OUTPUT.txt"""

import math
import re
import statistics
import sys
from collections import defaultdict

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}

rows: dict[tuple[int, str], dict[int, dict[str, float]]] = defaultdict(dict)
arms: list[str] = []
for line in open(sys.argv[1]):
    if " arm=" not in line:
        continue
    fields = dict(re.findall(r"(\w+)=([\w.\-]+)", line))
    arm, flight, rnd = fields["arm"], int(fields["in_flight"]), int(fields["round"])
    if arm not in arms:
        arms.append(arm)
    rows[(flight, arm)][rnd] = {
        k: float(v.rstrip("ms")) for k, v in fields.items() if k not in ("arm", "round") and v != "-"
    }


def interval(ratios: list[float]) -> str:
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return f"{math.exp(mean):.3f}"
    half = T95[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"


for flight in sorted({f for f, _ in rows}):
    print(f"## {flight} in flight")
    for arm in arms:
        per = rows[(flight, arm)]
        med = {k: statistics.median(r[k] for r in per.values()) for k in next(iter(per.values()))}
        print(
            f"{arm:14s} rps {med['rps']:.0f} (rounds {', '.join('%.0f' % r['rps'] for r in per.values())}) "
            f"server_us {med['server_us_per_req']:.0f} cores {med['server_cores']:.2f} "
            f"p50/p90/p99/max {med['p50']:.1f}/{med['p90']:.1f}/{med['p99']:.1f}/{med['max']:.1f} ms"
            + (f" items/forward {med['items_per_forward']:.1f}" if "items_per_forward" in med else "")
        )
    sift = [a for a in arms if a != "floor"]
    for metric, name in (("server_us_per_req", "CPU per request (requests per server-core second)"), ("rps", "requests/s")):
        print(f"ratios of {name}, per round:")
        pairs = [(a, "floor") for a in sift if "floor" in arms] + [(a, sift[0]) for a in sift[1:]]
        for a, b in pairs:
            common = sorted(set(rows[(flight, a)]) & set(rows[(flight, b)]))
            if metric == "rps":
                ratios = [rows[(flight, a)][r]["rps"] / rows[(flight, b)][r]["rps"] for r in common]
            else:  # fewer µs per request is more: b's µs over a's
                ratios = [rows[(flight, b)][r][metric] / rows[(flight, a)][r][metric] for r in common]
            print(f"  {a} / {b}: {interval(ratios)}  ({', '.join(f'{x:.2f}' for x in ratios)})")
