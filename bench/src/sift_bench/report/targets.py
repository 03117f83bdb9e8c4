"""The engine's targets, evaluated per arm (reported, never asserted).

- sequential: server queue time p95 <= 0.5 ms (the engine-core issue's bound), in every valid trial;
- bursts of 8 and of 32: one forward in >= 23 of 24 bursts (the same fraction
  of however many bursts ran), in every valid trial;
- closed loop at 8 and 32 in flight: throughput >= 0.95 x the in-process
  items/s of the same batches, replayed after each trial (``sift_bench.run.replay``;
  the geometric mean of the per-trial ratios); without a replay, the geometric
  mean over trials >= 0.95 x the best in-process items/s over batch sizes 1-64
  (the curve, which the report keeps beside the replay for comparison); and
  >= the ``timed`` arm's (geometric mean of the paired per-trial ratios >= 1);
- closed loop against the released reference server (when a ``reference`` arm
  ran): p50, p90, p99 and max each not shown larger and throughput not shown
  smaller over paired trials (``dominance``). This replaces a fixed ratio of
  p99 and max to p50, which a schedule can meet by making its median worse.

Beside the 0.95 x ceiling target the report gives the reachable ceiling: the
best in-process items/s over batch sizes no larger than the items in flight
(8 one-item requests can never form a batch of 64).

Each target is ``met``, ``not met`` or ``n/a`` (no valid data, no ceiling, no
timed or reference arm to compare with, no trace to count forwards in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sift_bench.report.analysis import find_ratio

SEQ_QUEUE_P95_MS = 0.5
BURST_ONE_FORWARD = (23, 24)
CEILING_FRACTION = 0.95
REFERENCE_ARM = "timed"


def _status(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "not met")


def _target(name: str, rule: str, value: str, ok: bool | None) -> dict[str, Any]:
    return {"target": name, "rule": rule, "value": value, "status": _status(ok)}


def needed_one_forward(bursts: int) -> int:
    num, den = BURST_ONE_FORWARD
    return math.ceil(bursts * num / den)


def reachable_ceiling(ceiling: Mapping[str, Any], items_in_flight: int) -> dict[str, float] | None:
    """The best in-process ``{"size", "items_per_s"}`` over batch sizes no
    larger than ``items_in_flight``; None when the curve has no such size."""
    sizes = [(int(k), v["items_per_s"]) for k, v in ceiling["sizes"].items() if int(k) <= items_in_flight]
    if not sizes:
        return None
    size, rate = max(sizes, key=lambda kv: kv[1])
    return {"size": float(size), "items_per_s": rate}


def _curve_text(ceiling: Mapping[str, Any] | None, geo: float | None, items_in_flight: int) -> str:
    """The served items/s against the once-per-bench curve: the best size, and the
    best size the items in flight can form (empty without a curve)."""
    if not ceiling or geo is None:
        return ""
    best = ceiling["best"]["items_per_s"]
    text = f"{geo:.1f}/s = {geo / best:.3f} x"
    reachable = reachable_ceiling(ceiling, items_in_flight)
    if reachable is not None:
        text += (
            f" (reachable at {items_in_flight} in flight: {reachable['items_per_s']:.1f}/s at batch "
            f"{reachable['size']:.0f}, {geo / reachable['items_per_s']:.3f} x)"
        )
    return text


def evaluate(
    analysis: Mapping[str, Any],
    ceiling: Mapping[str, Any] | None,
    phase_names: Sequence[str],
    items_per_request: int = 1,
    dominance: Sequence[Mapping[str, Any]] = (),
) -> dict[str, list[dict[str, Any]]]:
    """``dominance``: the verdicts of ``dominance.verdicts`` (as dicts), if any."""
    summary: Mapping[str, Any] = analysis["summary"]
    ratios = analysis["ratios"]
    replayed: Mapping[str, Any] = analysis.get("replay") or {}
    best = ceiling["best"]["items_per_s"] if ceiling else None
    out: dict[str, list[dict[str, Any]]] = {}
    for arm, arm_summary in summary.items():
        rows: list[dict[str, Any]] = []
        seq = arm_summary.get("sequential")
        if "sequential" in phase_names:
            values = [r["queue_p95_ms"] for r in seq["per_trial"]] if seq else []
            values = [v for v in values if v is not None]
            worst = max(values) if values else None
            rows.append(
                _target(
                    "sequential queue p95",
                    f"<= {SEQ_QUEUE_P95_MS} ms in every trial",
                    f"worst {worst:.3f} ms" if worst is not None else "-",
                    None if worst is None else worst <= SEQ_QUEUE_P95_MS,
                )
            )
        for phase in (p for p in phase_names if p.startswith("burst")):
            data = arm_summary.get(phase)
            size = phase.removeprefix("burst")
            if not data or not data["joined"]:
                # No trace joined (the reference server writes none): nothing to count.
                rows.append(_target(f"bursts of {size} in one forward", "", "-", None))
                continue
            counts = [(r["one_forward"], r["bursts"]) for r in data["per_trial"]]
            ok = all(k >= needed_one_forward(n) for k, n in counts)
            num, den = BURST_ONE_FORWARD
            rows.append(
                _target(
                    f"bursts of {size} in one forward",
                    f">= {num}/{den} of bursts in every trial",
                    ", ".join(f"{k}/{n}" for k, n in counts),
                    ok,
                )
            )
        for phase in (p for p in phase_names if p.startswith("closed")):
            data = arm_summary.get(phase)
            conc = phase.removeprefix("closed")
            geo = data["throughput"]["geomean"] if data else None
            curve = _curve_text(ceiling, geo, int(conc) * items_per_request)
            paired = replayed.get(arm, {}).get(phase, {}).get("ratio")
            if paired is not None:
                # The replay of the very batches this arm's servers formed, trial by trial.
                value = f"{paired['ratio']:.3f}"
                if paired["low"] is not None:
                    value += f" [{paired['low']:.3f}, {paired['high']:.3f}]"
                value += f" over {paired['n']} trial(s)" + (f"; old curve-based: {curve}" if curve else "")
                rows.append(
                    _target(
                        f"throughput at {conc} vs ceiling",
                        f">= {CEILING_FRACTION} x in-process replay of the same batches (geometric mean of "
                        "per-trial ratios)",
                        value,
                        paired["ratio"] >= CEILING_FRACTION,
                    )
                )
            elif best is None or geo is None:
                rows.append(_target(f"throughput at {conc} vs ceiling", f">= {CEILING_FRACTION} x best", "-", None))
            else:
                rows.append(
                    _target(
                        f"throughput at {conc} vs ceiling",
                        f">= {CEILING_FRACTION} x best in-process ({best:.1f}/s)",
                        curve,
                        geo / best >= CEILING_FRACTION,
                    )
                )
            if arm != REFERENCE_ARM:
                ratio = find_ratio(ratios, phase, arm, REFERENCE_ARM) if REFERENCE_ARM in summary else None
                value = "-"
                if ratio is not None:
                    value = f"{ratio['ratio']:.3f}"
                    if ratio["low"] is not None:
                        value += f" [{ratio['low']:.3f}, {ratio['high']:.3f}]"
                rows.append(
                    _target(
                        f"throughput at {conc} vs {REFERENCE_ARM}",
                        "geometric mean ratio >= 1",
                        value,
                        None if ratio is None else ratio["ratio"] >= 1.0,
                    )
                )
            for verdict in (v for v in dominance if v["arm"] == arm and v["phase"] == phase):
                failed = ", ".join(verdict["failed"])
                rows.append(
                    _target(
                        f"closed {conc} dominates {verdict['reference']}",
                        "p50, p90, p99, max not larger, items/s not smaller (95 % interval, paired trials)",
                        "all figures pass" if verdict["dominates"] else (f"fails: {failed}" if failed else "no pairs"),
                        verdict["dominates"] if verdict["checks"] else None,
                    )
                )
        out[arm] = rows
    return out
