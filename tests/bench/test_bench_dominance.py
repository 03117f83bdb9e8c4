"""The dominance verdict: every latency percentile at most the reference's and
throughput at least the reference's, each within the interval over paired trials."""

from __future__ import annotations

from typing import Any

import pytest

from sift_bench.report.dominance import verdict, verdicts


def figures(p50: float, p90: float, p99: float, mx: float, tput: float) -> dict[str, float]:
    return {"p50": p50, "p90": p90, "p99": p99, "max": mx, "throughput": tput}


REF = {0: figures(200, 250, 280, 290, 36), 1: figures(210, 255, 282, 287, 37), 2: figures(205, 252, 281, 288, 36.5)}


def test_better_everywhere_dominates() -> None:
    arm = {t: figures(f["p50"] * 0.9, f["p90"] * 0.9, f["p99"] * 0.8, f["max"] * 0.8, f["throughput"] * 1.05)
           for t, f in REF.items()}  # fmt: skip
    result = verdict("adaptive", "reference", "closed8", arm, REF)
    assert result.dominates
    assert result.failed == ()
    assert result.trials == (0, 1, 2)
    assert [c.stat for c in result.checks] == ["p50", "p90", "p99", "max", "throughput"]


def test_a_worse_tail_is_not_bought_by_a_better_median_or_throughput() -> None:
    # Issue 19's extract figures at 8 in flight: same median, p99 and max 30-45 % higher.
    arm = {t: figures(f["p50"] * 0.95, f["p90"], f["p99"] * 1.35, f["max"] * 1.45, f["throughput"] * 1.1)
           for t, f in REF.items()}  # fmt: skip
    result = verdict("adaptive", "reference", "closed8", arm, REF)
    assert not result.dominates
    assert result.failed == ("p99", "max")


def test_lower_throughput_fails_even_with_better_latencies() -> None:
    arm = {t: figures(f["p50"] * 0.5, f["p90"] * 0.5, f["p99"] * 0.5, f["max"] * 0.5, f["throughput"] * 0.8)
           for t, f in REF.items()}  # fmt: skip
    result = verdict("adaptive", "reference", "closed32", arm, REF)
    assert result.failed == ("throughput",)


def test_within_the_interval_counts_as_not_worse() -> None:
    # Noisy trials around equality: the ratio interval holds 1, so no figure is shown worse.
    arm = {0: figures(220, 260, 300, 300, 35), 1: figures(190, 245, 262, 270, 38.5), 2: figures(212, 256, 290, 300, 36)}
    result = verdict("adaptive", "reference", "closed8", arm, REF)
    lows = {c.stat: c.interval.low for c in result.checks}
    assert all(low is not None and low <= 1.0 for stat, low in lows.items() if stat != "throughput")
    assert result.dominates


def test_one_trial_uses_the_point_ratio() -> None:
    ref = {0: figures(100, 110, 120, 130, 50)}
    assert verdict("a", "r", "closed8", {0: figures(100, 110, 120, 130, 50)}, ref).dominates
    worse = verdict("a", "r", "closed8", {0: figures(100, 110, 121, 130, 50)}, ref)
    assert worse.failed == ("p99",)
    assert worse.checks[2].interval.low is None


def test_trials_are_paired_and_unpaired_ones_ignored() -> None:
    arm = {1: figures(100, 100, 100, 100, 100), 5: figures(1, 1, 1, 1, 1)}
    result = verdict("a", "r", "closed8", arm, REF)
    assert result.trials == (1,)
    assert result.dominates


@pytest.mark.parametrize("arm", [{}, {0: {"p50": 1.0}}, {0: figures(0, 1, 1, 1, 1)}])
def test_no_comparable_figures_is_no_dominance(arm: dict[int, dict[str, float]]) -> None:
    result = verdict("a", "r", "closed8", arm, REF)
    assert result.checks == ()
    assert not result.dominates


def _phase(rows: list[tuple[int, float, float]]) -> dict[str, Any]:
    return {
        "per_trial": [
            {"trial": t, "latency_p50_ms": p50, "latency_p90_ms": p50, "latency_p99_ms": p99,
             "latency_max_ms": p99, "throughput": 10.0}
            for t, p50, p99 in rows
        ]
    }  # fmt: skip


def test_verdicts_compare_every_arm_with_the_reference_on_closed_phases() -> None:
    summary = {
        "adaptive": {"closed8": _phase([(0, 10, 20), (1, 10, 20)]), "burst8": {}},
        "timed": {"closed8": _phase([(0, 10, 40), (1, 10, 40)])},
        "reference": {"closed8": _phase([(0, 10, 30), (1, 10, 30)])},
    }
    found = verdicts(summary, ["reference"], ["sequential", "burst8", "closed8"])
    assert [(v.arm, v.phase, v.dominates) for v in found] == [
        ("adaptive", "closed8", True),
        ("timed", "closed8", False),
    ]
    assert found[1].as_dict()["failed"] == ["p99", "max"]


def test_dominance_is_a_target_of_each_arm_against_the_reference() -> None:
    from sift_bench.report.targets import evaluate

    summary = {
        "adaptive": {"closed8": _phase([(0, 10, 20), (1, 10, 20)]) | {"throughput": {"geomean": 10.0}}},
        "reference": {"closed8": _phase([(0, 10, 30), (1, 10, 30)]) | {"throughput": {"geomean": 10.0}}},
    }
    found = [v.as_dict() for v in verdicts(summary, ["reference"], ["closed8"])]
    targets = evaluate({"summary": summary, "ratios": []}, None, ["closed8"], 1, found)
    (row,) = [t for t in targets["adaptive"] if "dominates" in t["target"]]
    assert (row["target"], row["status"]) == ("closed 8 dominates reference", "met")
    assert not [t for t in targets["reference"] if "dominates" in t["target"]]
    worse = [v.as_dict() for v in verdicts({**summary, "adaptive": summary["reference"],
                                            "reference": summary["adaptive"]}, ["reference"], ["closed8"])]  # fmt: skip
    (row,) = [t for t in evaluate({"summary": summary, "ratios": []}, None, ["closed8"], 1, worse)["adaptive"]
              if "dominates" in t["target"]]  # fmt: skip
    assert (row["status"], row["value"]) == ("not met", "fails: p99, max")
