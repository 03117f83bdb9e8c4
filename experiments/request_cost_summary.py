"""Medians per arm, route and load of request_cost*.sh output lines (requests/s and the server's
CPU per request), and each arm's median requests/s against the first arm's.

    request_cost_summary.py OUTPUT.txt"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict


def main() -> None:
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    arms: list[str] = []
    with open(sys.argv[1], encoding="utf-8") as output:
        for line in output:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if "req/s" not in fields:
                continue
            if fields["arm"] not in arms:
                arms.append(fields["arm"])
            key = (fields["arm"], fields["route"], fields["in_flight"])
            rows[key].append((float(fields["req/s"]), float(fields.get("server_us_per_req", "nan"))))
    loads = sorted({(route, n) for _, route, n in rows}, key=lambda k: (k[0], int(k[1])))
    print(
        "| route | in flight | "
        + " | ".join(f"{a} req/s (µs/req)" for a in arms)
        + " | "
        + " | ".join(f"{a}/{arms[0]}" for a in arms[1:])
        + " |"
    )
    print("|---|---:|" + "---:|" * (2 * len(arms) - 1))
    for route, n in loads:
        medians = []
        cells = []
        for arm in arms:
            samples = rows.get((arm, route, n), [])
            rate = statistics.median(s[0] for s in samples) if samples else float("nan")
            cpu = statistics.median(s[1] for s in samples) if samples else float("nan")
            medians.append(rate)
            cells.append(f"{rate:.0f} ({cpu:.0f})")
        ratios = [f"×{m / medians[0]:.2f}" for m in medians[1:]]
        print(f"| {route} | {n} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
