"""``sift bench distribution``: each closed-loop phase's latency distribution per arm
and trial, from a run's per-request columns, and each arm against a base arm over
the paired trials (the report pools latencies over trials; this keeps them apart).

Per arm, phase and trial: items/s over the phase's window, latency p50 / p90 / p99 /
max (valid requests) and the mean number of requests per forward. Then, per phase and
figure, the ratio arm / base in each trial and their geometric mean.

    sift bench distribution bench-results/.../results.json [--base timed]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sift_bench.report.archive import is_slim, load_results
from sift_bench.report.stats import geometric_mean, percentile

FIGURES = ("items/s", "p50", "p90", "p99", "max", "per forward")
HELP = "latency distribution of each closed-loop phase per arm and trial, and each arm against a base arm"


@dataclass(frozen=True, slots=True)
class TrialFigures:
    """One closed-loop phase of one run, in ``FIGURES`` order."""

    values: tuple[float, ...]


def phase_figures(phase: Mapping[str, Any]) -> TrialFigures:
    """The figures of one closed-loop phase from its per-request columns."""
    latency = [(recv - send) * 1e3 for send, recv, ok in zip(phase["send"], phase["recv"], phase["ok"], strict=True)
               if ok]  # fmt: skip
    if not latency:
        raise ValueError("a closed-loop phase without a valid request")
    span = phase["window_end"] - phase["window_start"]
    sizes = {fid: n for fid, n in zip(phase["forward_id"], phase["forward_requests"], strict=True) if fid is not None}
    per_forward = math.fsum(sizes.values()) / len(sizes) if sizes else math.nan
    points = tuple(percentile(latency, p) for p in (50, 90, 99))
    return TrialFigures((len(latency) / span, *points, max(latency), per_forward))


def closed_loop_table(results: Mapping[str, Any]) -> dict[tuple[str, str], dict[int, TrialFigures]]:
    """(arm, phase) to each trial's figures, valid runs only."""
    table: dict[tuple[str, str], dict[int, TrialFigures]] = defaultdict(dict)
    for run in results["runs"]:
        if not run.get("valid", True):
            continue
        for name, phase in run["phases"].items():
            if phase["kind"] == "closed":
                table[(run["arm"], name)][run["trial"]] = phase_figures(phase)
    return dict(table)


def paired_ratios(ours: Mapping[int, TrialFigures], base: Mapping[int, TrialFigures]) -> list[tuple[str, list[float]]]:
    """Per figure, arm / base in each trial both ran (a figure either lacks is left out)."""
    trials = sorted(set(ours) & set(base))
    out = []
    for index, label in enumerate(FIGURES):
        ratios = [ours[t].values[index] / base[t].values[index] for t in trials]
        if ratios and all(math.isfinite(r) and r > 0 for r in ratios):
            out.append((label, ratios))
    return out


def _cell(trial: int, v: tuple[float, ...]) -> str:
    return f"t{trial}: {v[0]:.1f}/s {v[1]:.0f}/{v[2]:.0f}/{v[3]:.0f}/{v[4]:.0f} ms fwd {v[5]:.1f}"


def lines(results: Mapping[str, Any], base: str | None = None) -> list[str]:
    """The tool's output: a row per arm and phase, then the ratios to ``base``
    (default: the run's first arm)."""
    if is_slim(results):
        raise ValueError("these results have no per-request columns (an archive); use the run's results.json")
    table = closed_loop_table(results)
    arms = list(dict.fromkeys(run["arm"] for run in results["runs"]))
    base = base or (arms[0] if arms else None)
    if base is not None and base not in arms:
        raise ValueError(f"no arm {base!r} in these results (arms: {', '.join(arms)})")
    out = []
    for (arm, phase), trials in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [_cell(trial, figures.values) for trial, figures in sorted(trials.items())]
        out.append(f"{phase:9s} {arm:9s} " + "  ".join(cells))
    if base is None:  # no runs at all
        return out
    for phase in sorted({phase for _, phase in table}):
        for arm in arms:
            if arm == base or (arm, phase) not in table or (base, phase) not in table:
                continue
            for label, ratios in paired_ratios(table[(arm, phase)], table[(base, phase)]):
                each = " ".join(f"{r:.3f}" for r in ratios)
                out.append(f"{phase:9s} {label:11s} {arm}/{base} {each} geomean {geometric_mean(ratios):.3f}")
    return out


def _main(args: argparse.Namespace) -> int:
    try:
        print("\n".join(lines(load_results(args.results), args.base)))
    except ValueError as exc:
        print(f"sift bench distribution: {exc}", file=sys.stderr)
        return 2
    return 0


def add_distribution(commands: Any) -> None:
    """Add ``distribution`` to ``sift bench``'s subcommands."""
    tool = commands.add_parser("distribution", help=HELP, description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    tool.add_argument("results", type=Path, metavar="RESULTS", help="a run's results.json (with per-request columns)")
    tool.add_argument("--base", metavar="ARM", help="the arm the others are divided by (default: the run's first)")
    tool.set_defaults(handler=_main)
