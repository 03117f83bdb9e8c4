"""Tables, verdicts and JSON for a set of simulated runs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from sift_bench.simulate.metrics import Summary

# Relative and absolute slack when comparing times (a tie is not a loss).
REL_TOL = 0.01
ABS_TOL = 2e-6
CHALLENGER = "adaptive"
REFERENCES = ("timed", "immediate")


@dataclass(frozen=True, slots=True)
class Criterion:
    attr: str
    label: str
    higher_is_better: bool
    unit: Literal["ms", "share", "rate", "ratio"]

    def value(self, summary: Summary) -> float:
        return float(getattr(summary, self.attr))

    def format(self, summary: Summary) -> str:
        value = self.value(summary)
        if math.isnan(value):
            return "-"
        if self.unit == "share":
            return f"{value:.0%}"
        if self.unit == "rate":
            return f"{value:.1f}/s"
        if self.unit == "ratio":
            return f"{value:.2f}x"
        return f"{value * 1e3:.3f}ms"


QUEUE_P95 = Criterion("queue_p95", "queue p95", False, "ms")
ONE_FORWARD = Criterion("one_forward_share", "bursts in 1 fwd", True, "share")
MEAN_LATENCY = Criterion("latency_mean", "mean latency", False, "ms")
THROUGHPUT = Criterion("throughput", "throughput", True, "rate")
LATENCY_P50 = Criterion("latency_p50", "p50", False, "ms")
LATENCY_P90 = Criterion("latency_p90", "p90", False, "ms")
LATENCY_P99 = Criterion("latency_p99", "p99", False, "ms")
LATENCY_MAX = Criterion("latency_max", "max", False, "ms")

# The main figure per trace kind, compared lexicographically, except for the
# kinds in DOMINANCE.
MAIN_FIGURE: dict[str, tuple[Criterion, ...]] = {
    "sequential": (QUEUE_P95,),
    "bursts": (ONE_FORWARD, MEAN_LATENCY),
    "poisson": (MEAN_LATENCY,),
    "replay": (MEAN_LATENCY,),
    "closed": (THROUGHPUT, LATENCY_P50, LATENCY_P90, LATENCY_P99, LATENCY_MAX),
    "open": (LATENCY_P50, LATENCY_P90, LATENCY_P99, LATENCY_MAX),
}
# Closed loops: every one of the figures must be at least as good as this
# reference's (no trading the tail for throughput or back).
# Open loops (independent users): every percentile at least as good as the timed
# window's, within ``KIND_TOL`` (an open loop's percentiles move by a few per cent with
# the timing of single arrivals; the ``ideal`` arm shows what greedy batching reaches).
DOMINANCE: dict[str, str] = {"closed": "timed", "open": "timed"}
KIND_TOL: dict[str, float] = {"open": 0.05}


def compare(a: Summary, b: Summary, criteria: Sequence[Criterion], rel_tol: float = REL_TOL) -> int:
    """-1 if ``a`` is better on the main figure, 1 if worse, 0 if tied."""
    for criterion in criteria:
        va, vb = criterion.value(a), criterion.value(b)
        if criterion.unit == "share":
            tolerance = 1e-9
        elif criterion.unit in ("rate", "ratio"):
            tolerance = rel_tol * min(abs(va), abs(vb))
        else:
            tolerance = max(ABS_TOL, rel_tol * min(abs(va), abs(vb)))
        if abs(va - vb) <= tolerance:
            continue
        better = va > vb if criterion.higher_is_better else va < vb
        return -1 if better else 1
    return 0


@dataclass(frozen=True, slots=True)
class Verdict:
    forward: str
    family: str
    kind: str
    figure: str
    values: dict[str, str]
    best_reference: str
    ok: bool


def dominates(a: Summary, b: Summary, criteria: Sequence[Criterion], rel_tol: float = REL_TOL) -> bool:
    """``a`` is at least as good as ``b`` on every one of ``criteria`` (within tolerance)."""
    return all(compare(a, b, (criterion,), rel_tol) <= 0 for criterion in criteria)


def verdicts(summaries: Iterable[Summary]) -> list[Verdict]:
    """Per forward model and family: is adaptive at least as good as the
    better of timed and immediate on the family's main figure? (Closed and open
    loops: does it dominate the reference in ``DOMINANCE`` on every figure?)"""
    table: dict[tuple[str, str], dict[str, Summary]] = {}
    for summary in summaries:
        table.setdefault((summary.forward, summary.family), {})[summary.policy] = summary
    result = []
    for (forward, family), by_policy in table.items():
        if CHALLENGER not in by_policy or not all(p in by_policy for p in REFERENCES):
            continue
        kind = by_policy[CHALLENGER].kind
        criteria = MAIN_FIGURE[kind]
        values = {policy: " / ".join(c.format(summary) for c in criteria) for policy, summary in by_policy.items()}
        if kind in DOMINANCE:
            best = DOMINANCE[kind]
            figure = " and ".join(c.label for c in criteria)
            ok = dominates(by_policy[CHALLENGER], by_policy[best], criteria, KIND_TOL.get(kind, REL_TOL))
        else:
            best = REFERENCES[0]
            for other in REFERENCES[1:]:
                if compare(by_policy[other], by_policy[best], criteria) < 0:
                    best = other
            figure = " then ".join(c.label for c in criteria)
            ok = compare(by_policy[CHALLENGER], by_policy[best], criteria) <= 0
        result.append(
            Verdict(forward=forward, family=family, kind=kind, figure=figure, values=values, best_reference=best, ok=ok)
        )
    return result


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1e3:.3f}"


def summary_table(summaries: Sequence[Summary]) -> str:
    header = [
        "forward", "family", "policy", "q p50 ms", "q p95 ms", "q p99 ms", "mean lat ms",
        "lat p50/p90/p99/max ms", "fwd/burst", "1-fwd", "req/s", "batch", "splits", "reasons",
    ]  # fmt: skip
    rows = []
    for s in summaries:
        rows.append(
            [
                s.forward,
                s.family,
                s.policy,
                _ms(s.queue_p50),
                _ms(s.queue_p95),
                _ms(s.queue_p99),
                _ms(s.latency_mean),
                "/".join(f"{v * 1e3:.1f}" for v in (s.latency_p50, s.latency_p90, s.latency_p99, s.latency_max)),
                "-" if math.isnan(s.forwards_per_burst) else f"{s.forwards_per_burst:.2f}",
                "-" if math.isnan(s.one_forward_share) else f"{s.one_forward_share:.0%}",
                f"{s.throughput:.0f}",
                f"{s.mean_batch:.1f}",
                " ".join(f"{k}x{v}" for k, v in s.burst_patterns.items()),
                " ".join(f"{k}:{v}" for k, v in s.reasons.items()),
            ]
        )
    return render_table(rows, header)


def verdict_table(results: Sequence[Verdict], policies: Sequence[str] = (CHALLENGER, *REFERENCES)) -> str:
    header = ["forward", "family", "main figure", *policies, "verdict"]
    rows = [
        [
            v.forward,
            v.family,
            v.figure,
            *(v.values.get(p, "-") for p in policies),
            "ok" if v.ok else f"LOSES to {v.best_reference}",
        ]
        for v in results
    ]
    return render_table(rows, header)


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, config: dict[str, object], summaries: Sequence[Summary], results: Sequence[Verdict]) -> None:
    document = {
        "config": config,
        "summaries": [asdict(s) for s in summaries],
        "verdicts": [asdict(v) for v in results],
    }
    path.write_text(json.dumps(_clean(document), indent=2) + "\n", encoding="utf-8")
