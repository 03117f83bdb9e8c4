"""Does an arm dominate the reference? A pure verdict over paired trials.

Arm X dominates the reference on a closed-loop phase when each of its latency
percentiles (p50, p90, p99, max) is at most the reference's and its
throughput at least the reference's. Trials are paired (trial i of X against
trial i of the reference, both run under the same conditions), each figure is
compared as the geometric mean of per-trial ratios with a 95 % interval, and
"at most" means "not shown to be larger": a latency passes when the low end
of its ratio interval is ≤ 1, throughput when the high end is ≥ 1 (with one
trial, the point ratio decides). Neither half can buy the other: every check
must pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sift_bench.report.stats import RatioInterval, geometric_ratio

LATENCY_STATS: tuple[str, ...] = ("p50", "p90", "p99", "max")
# The per-trial figure each check reads (analysis.summarize_arm_phase writes them).
TRIAL_KEYS: Mapping[str, str] = {
    "p50": "latency_p50_ms",
    "p90": "latency_p90_ms",
    "p99": "latency_p99_ms",
    "max": "latency_max_ms",
    "throughput": "throughput",
}


@dataclass(frozen=True, slots=True)
class Check:
    """One figure of X against the reference: ``ratio`` is X / reference."""

    stat: str
    interval: RatioInterval
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return {"stat": self.stat, "passed": self.passed, **self.interval.as_dict()}


@dataclass(frozen=True, slots=True)
class Verdict:
    arm: str
    reference: str
    phase: str
    checks: tuple[Check, ...]
    trials: tuple[int, ...]

    @property
    def dominates(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.stat for c in self.checks if not c.passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "reference": self.reference,
            "phase": self.phase,
            "trials": list(self.trials),
            "dominates": self.dominates,
            "failed": list(self.failed),
            "checks": [c.as_dict() for c in self.checks],
        }


def _passes(stat: str, interval: RatioInterval) -> bool:
    if stat == "throughput":
        return (interval.high if interval.high is not None else interval.ratio) >= 1.0
    return (interval.low if interval.low is not None else interval.ratio) <= 1.0


def verdict(
    arm: str,
    reference: str,
    phase: str,
    arm_trials: Mapping[int, Mapping[str, float]],
    reference_trials: Mapping[int, Mapping[str, float]],
) -> Verdict:
    """Compare ``arm`` with ``reference`` over the trials both have; each map is
    ``{trial: {"p50": ms, "p90": ms, "p99": ms, "max": ms, "throughput": items/s}}``.
    No shared trial (or a missing or non-positive figure) gives no checks: no
    dominance."""
    shared = tuple(sorted(set(arm_trials) & set(reference_trials)))
    checks: list[Check] = []
    for stat in (*LATENCY_STATS, "throughput"):
        pairs = [(arm_trials[t].get(stat), reference_trials[t].get(stat)) for t in shared]
        if not pairs or any(a is None or b is None or a <= 0 or b <= 0 for a, b in pairs):
            return Verdict(arm, reference, phase, (), shared)
        interval = geometric_ratio([float(a) for a, _ in pairs], [float(b) for _, b in pairs])  # type: ignore[arg-type]
        checks.append(Check(stat, interval, _passes(stat, interval)))
    return Verdict(arm, reference, phase, tuple(checks), shared)


def _trial_figures(phase_summary: Mapping[str, Any]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for row in phase_summary.get("per_trial", []):
        out[int(row["trial"])] = {stat: row[key] for stat, key in TRIAL_KEYS.items() if row.get(key) is not None}
    return out


def verdicts(
    summary: Mapping[str, Mapping[str, Any]], references: Sequence[str], phases: Sequence[str]
) -> list[Verdict]:
    """Every non-reference arm against every reference arm on every closed phase
    of an analysis summary (``analysis.analyze(...)["summary"]``)."""
    out = []
    for reference in references:
        for arm in summary:
            if arm in references:
                continue
            for phase in phases:
                if not phase.startswith("closed"):
                    continue
                mine, theirs = summary[arm].get(phase), summary.get(reference, {}).get(phase)
                if mine is None or theirs is None:
                    continue
                out.append(verdict(arm, reference, phase, _trial_figures(mine), _trial_figures(theirs)))
    return out
