"""Served items/s against the in-process replay of the same batches, per trial.

Pure code over results.json's dicts. Per arm and closed-loop phase, each valid
trial that has a replay gives: the served items/s (the phase's window), the
replayed items/s of the forwards that trial's server formed, their ratio, and
the time per item of those forwards in the server (from its trace) beside the
replay's. Across trials, the geometric mean of the per-trial ratios with the
bench's 95 % t-interval (``stats.geometric_ratio``), and the same for the
forward's own time per item (server / replay: above 1, the server's forward
itself ran slower than in-process, not only the time around it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sift_bench.report.stats import geometric_ratio


def trial_row(trial: int, served: float, block: Mapping[str, Any]) -> dict[str, Any] | None:
    """One trial's figures of one phase; None when nothing was replayed."""
    replay = block.get("replay") or {}
    rate = replay.get("items_per_s")
    if not rate or served <= 0:
        return None
    server_ms = block.get("server_ms_per_item")
    replay_ms = replay.get("ms_per_item")
    passes = replay.get("pass_s") or []
    return {
        "trial": trial,
        "served_items_per_s": served,
        "replay_items_per_s": rate,
        "ratio": served / rate,
        "forwards": block["forwards"],
        "total_forwards": block["total_forwards"],
        "mean_forward_items": block["items"] / block["forwards"] if block["forwards"] else None,
        "server_ms_per_item": server_ms,
        "replay_ms_per_item": replay_ms,
        "forward_slowdown": server_ms / replay_ms if server_ms and replay_ms else None,
        "busy_fraction": block.get("busy_fraction"),
        "sub_forwards": [block.get("server_chunks"), replay.get("sub_forwards")],
        # Forwards the child's own fixed cost would have cut otherwise than the server did.
        "cuts": replay.get("cuts"),
        "pass_items_per_s": [replay["items"] / s for s in passes if s > 0],
        "not_in_trace": block.get("not_in_trace", 0),
    }


def _interval(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any] | None:
    pairs = [(a, b) for a, b in zip(numerators, denominators, strict=True) if a and b and a > 0 and b > 0]
    if not pairs:
        return None
    return geometric_ratio([a for a, _ in pairs], [b for _, b in pairs]).as_dict()


def replay_figures(
    runs: Sequence[Mapping[str, Any]], served: Mapping[tuple[str, int], Mapping[str, Mapping[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{arm: {phase: {"per_trial", "ratio", "slowdown"}}}`` over the valid runs
    with a replay; ``served``: per (arm, trial), per phase, ``run_phase_stats``."""
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in runs:
        block = run.get("replay") or {}
        if not run["valid"] or "phases" not in block:
            continue
        stats = served.get((run["arm"], run["trial"]), {})
        for phase, data in block["phases"].items():
            throughput = stats.get(phase, {}).get("throughput")
            row = trial_row(run["trial"], throughput, data) if throughput else None
            if row is not None:
                row["runtime"] = [run.get("server_runtime"), block.get("runtime")]
                rows.setdefault(run["arm"], {}).setdefault(phase, []).append(row)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for arm, phases in rows.items():
        for phase, per_trial in phases.items():
            per_trial.sort(key=lambda r: r["trial"])
            out.setdefault(arm, {})[phase] = {
                "per_trial": per_trial,
                "ratio": _interval([r["served_items_per_s"] for r in per_trial],
                                   [r["replay_items_per_s"] for r in per_trial]),
                "slowdown": _interval([r["server_ms_per_item"] for r in per_trial],
                                      [r["replay_ms_per_item"] for r in per_trial]),
            }  # fmt: skip
    return out
