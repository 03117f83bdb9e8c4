"""From the raw results (as stored in results.json) to per-arm figures.

Everything here reads plain dicts, so a report can be rebuilt from a results
file alone. Only *valid* runs count; latencies are pooled over an arm's valid
trials (nearest-rank percentiles), throughputs are kept per trial and
compared between arms as paired geometric ratios.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sift_bench.report.replay_analysis import replay_figures
from sift_bench.report.stats import geometric_mean, geometric_ratio, median, percentile, percentiles

MS = 1000.0


def _ms(values: Sequence[float]) -> list[float]:
    return [v * MS for v in values]


def run_phase_stats(phase: Mapping[str, Any], items_per_request: int = 1) -> dict[str, Any]:
    """Figures of one phase of one run, from its raw columns."""
    ok: list[bool] = phase["ok"]
    joined: list[bool] = phase["joined"]
    send, recv = phase["send"], phase["recv"]
    issued: list[float | None] = phase.get("issued") or [None] * len(send)
    n = len(ok)
    good = [i for i in range(n) if ok[i]]
    good_joined = [i for i in good if joined[i]]
    stats: dict[str, Any] = {
        "requests": n,
        "valid": len(good),
        "joined": sum(joined),
        "missing": n - sum(joined),
        "latency_ms": [(recv[i] - send[i]) * MS for i in good],
        "queue_ms": [(phase["start"][i] - phase["admitted"][i]) * MS for i in good_joined],
        "wait_ms": [(phase["start"][i] - phase["arrival"][i]) * MS for i in good_joined],
        "ingress_ms": [(phase["admitted"][i] - phase["arrival"][i]) * MS for i in good_joined],
        # Client and server share CLOCK_MONOTONIC, so these cross the process boundary.
        "client_ms": [(issued[i] - send[i]) * MS for i in good if issued[i] is not None],
        "to_server_ms": [(phase["arrival"][i] - (issued[i] or send[i])) * MS for i in good_joined],
        "forward_ms": [(phase["end"][i] - phase["start"][i]) * MS for i in good_joined],
        "to_client_ms": [(recv[i] - phase["end"][i]) * MS for i in good_joined],
    }
    sizes: dict[int, int] = {}
    for i in good_joined:
        sizes[phase["forward_id"][i]] = phase["forward_requests"][i]
    stats["forward_sizes"] = list(sizes.values())
    if phase["kind"] == "burst":
        bursts = phase["bursts"]
        stats["patterns"] = [b["label"] for b in bursts]
        stats["forwards_per_burst"] = [len(b["pattern"]) for b in bursts]
        stats["one_forward"] = sum(1 for b in bursts if b["one_forward"])
        stats["bursts"] = len(bursts)
        stats["arrival_span_ms"] = [b["arrival_span_ms"] for b in bursts if b["arrival_span_ms"] is not None]
        stats["issue_span_ms"] = [b["issue_span_ms"] for b in bursts if b.get("issue_span_ms") is not None]
    if phase["kind"] == "closed":
        span = phase["window_end"] - phase["window_start"]
        stats["throughput"] = len(good) * items_per_request / span if span > 0 else 0.0
        stats["server_cores"] = phase.get("server_cores")
        stats["client_cores"] = phase.get("client_cores")
        lat = stats["latency_ms"]
        stats["tail_ratio"] = percentile(lat, 99) / percentile(lat, 50) if lat else None
        stats["max_ratio"] = max(lat) / percentile(lat, 50) if lat else None
        stats["passed_over"] = passed_over(phase, good_joined)
    if phase["kind"] == "open":
        span = phase["window_end"] - phase["window_start"]
        lat = stats["latency_ms"]
        stats["achieved_rate"] = len(good) / span if span > 0 else 0.0
        stats["offered_rate"] = phase.get("offered_rate")
        seconds = phase.get("schedule_seconds") or 0.0
        # What this draw of the schedule sent (Poisson counts vary around the rate).
        stats["sent_rate"] = n / seconds if seconds > 0 else None
        stats["load"] = phase.get("load")
        stats["tail_ratio"] = percentile(lat, 99) / percentile(lat, 50) if lat else None
        stats["max_ratio"] = max(lat) / percentile(lat, 50) if lat else None
        scheduled: list[float | None] = phase.get("scheduled") or [None] * n
        # How far the load generator fell behind its schedule (its own queueing is not the server's).
        stats["lag_ms"] = [(send[i] - t) * MS for i, t in enumerate(scheduled) if t is not None]
        stats["server_cores"] = phase.get("server_cores")
        stats["client_cores"] = phase.get("client_cores")
    return stats


def passed_over(phase: Mapping[str, Any], indices: Sequence[int]) -> list[int]:
    """For each request, how many forwards started after it was admitted and
    before its own: zero or one for a fair queue, growing without bound for a
    request that keeps being passed over (starvation)."""
    starts = sorted({(phase["start"][i], phase["forward_id"][i]) for i in indices})
    times = [t for t, _ in starts]
    counts = []
    for i in indices:
        first = bisect.bisect_right(times, phase["admitted"][i])
        own = bisect.bisect_left(times, phase["start"][i])
        counts.append(max(0, own - first))
    return counts


def _pooled(per_trial: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return list(itertools.chain.from_iterable(s[key] for s in per_trial))


def summarize_arm_phase(per_trial: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """Pool one arm's valid trials of one phase."""
    stats = [s for _, s in per_trial]
    out: dict[str, Any] = {
        "trials": [t for t, _ in per_trial],
        "requests": sum(s["requests"] for s in stats),
        "joined": sum(s["joined"] for s in stats),
        "missing": sum(s["missing"] for s in stats),
        "latency_ms": percentiles(_pooled(stats, "latency_ms")),
        "queue_ms": percentiles(_pooled(stats, "queue_ms")),
        "wait_ms": percentiles(_pooled(stats, "wait_ms")),
        "ingress_ms": percentiles(_pooled(stats, "ingress_ms")),
        "client_ms": percentiles(_pooled(stats, "client_ms")),
        "to_server_ms": percentiles(_pooled(stats, "to_server_ms")),
        "forward_ms": percentiles(_pooled(stats, "forward_ms")),
        "to_client_ms": percentiles(_pooled(stats, "to_client_ms")),
        "per_trial": [],
    }
    sizes = _pooled(stats, "forward_sizes")
    out["mean_forward_requests"] = sum(sizes) / len(sizes) if sizes else None
    for trial, s in per_trial:
        row: dict[str, Any] = {
            "trial": trial,
            "latency_p50_ms": percentile(s["latency_ms"], 50) if s["latency_ms"] else None,
            "latency_p90_ms": percentile(s["latency_ms"], 90) if s["latency_ms"] else None,
            "latency_p99_ms": percentile(s["latency_ms"], 99) if s["latency_ms"] else None,
            "latency_max_ms": max(s["latency_ms"]) if s["latency_ms"] else None,
            "queue_p95_ms": percentile(s["queue_ms"], 95) if s["queue_ms"] else None,
        }
        for key in ("one_forward", "bursts", "throughput", "tail_ratio", "max_ratio", "server_cores", "client_cores",
                    "achieved_rate", "offered_rate", "sent_rate", "load"):  # fmt: skip
            if key in s:
                row[key] = s[key]
        out["per_trial"].append(row)
    if stats and "patterns" in stats[0]:
        out["patterns"] = dict(Counter(_pooled(stats, "patterns")).most_common())
        out["forwards_per_burst"] = dict(sorted(Counter(_pooled(stats, "forwards_per_burst")).items()))
        out["one_forward"] = sum(s["one_forward"] for s in stats)
        out["bursts"] = sum(s["bursts"] for s in stats)
        spans = _pooled(stats, "arrival_span_ms")
        out["arrival_span_ms"] = percentiles(spans) if spans else {"n": 0}
        out["issue_span_ms"] = percentiles(_pooled(stats, "issue_span_ms"))
    if stats and "passed_over" in stats[0]:
        out["passed_over"] = percentiles([float(n) for n in _pooled(stats, "passed_over")])
    if stats and "achieved_rate" in stats[0]:
        out["achieved_rate"] = [s["achieved_rate"] for s in stats]
        out["offered_rate"] = [s["offered_rate"] for s in stats]
        out["sent_rate"] = [s["sent_rate"] for s in stats if s.get("sent_rate") is not None]
        out["load"] = stats[0]["load"]
        out["lag_ms"] = percentiles(_pooled(stats, "lag_ms"))
    if stats and "throughput" in stats[0]:
        values = [s["throughput"] for s in stats if s["throughput"] > 0]
        out["throughput"] = {
            "per_trial": [s["throughput"] for s in stats],
            "geomean": geometric_mean(values) if values else None,
            "median": median(values) if values else None,
        }
    return out


def analyze(results: Mapping[str, Any]) -> dict[str, Any]:
    """Per-arm summaries, pairwise throughput ratios, and batch sizes seen."""
    items = int(results["config"].get("items_per_request", 1))
    arm_names = [a["name"] for a in results["arms"]]
    phase_names: list[str] = results["config"]["phases"]
    valid_runs = [r for r in results["runs"] if r["valid"]]
    per_run: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for run in valid_runs:
        per_run[(run["arm"], run["trial"])] = {
            name: run_phase_stats(phase, items) for name, phase in run["phases"].items()
        }
    summary: dict[str, dict[str, Any]] = {}
    for arm in arm_names:
        trials = sorted(t for (a, t) in per_run if a == arm)
        arm_summary: dict[str, Any] = {
            "valid_trials": len(trials),
            "runs": sum(1 for r in results["runs"] if r["arm"] == arm),
        }
        for phase in phase_names:
            rows = [(t, per_run[(arm, t)][phase]) for t in trials if phase in per_run[(arm, t)]]
            if rows:
                arm_summary[phase] = summarize_arm_phase(rows)
        summary[arm] = arm_summary

    ratios = []
    closed = [p for p in phase_names if p.startswith("closed")]
    for phase in closed:
        for a, b in itertools.combinations(arm_names, 2):
            shared = sorted(
                t
                for (arm, t) in per_run
                if arm == a and (b, t) in per_run and phase in per_run[(a, t)] and phase in per_run[(b, t)]
            )
            pairs = [(per_run[(a, t)][phase]["throughput"], per_run[(b, t)][phase]["throughput"]) for t in shared]
            pairs = [(x, y) for x, y in pairs if x > 0 and y > 0]
            entry: dict[str, Any] = {"phase": phase, "numerator": a, "denominator": b, "trials": shared}
            if pairs:
                entry.update(geometric_ratio([x for x, _ in pairs], [y for _, y in pairs]).as_dict())
            else:
                entry.update({"ratio": None, "low": None, "high": None, "n": 0, "per_trial": []})
            ratios.append(entry)
    return {
        "summary": summary,
        "ratios": ratios,
        "batch_sizes_seen": batch_sizes_seen(results),
        "replay": replay_figures(valid_runs, per_run),
    }


def batch_sizes_seen(results: Mapping[str, Any]) -> list[int]:
    """Items per forward over the measured phases of every run."""
    seen: set[int] = set()
    for run in results["runs"]:
        for phase in run.get("phases", {}).values():
            seen.update(n for n, j in zip(phase["forward_items"], phase["joined"], strict=True) if j and n)
    return sorted(seen)


def find_ratio(
    ratios: Sequence[Mapping[str, Any]], phase: str, numerator: str, denominator: str
) -> dict[str, Any] | None:
    """The ratio ``numerator / denominator`` (inverting a stored reverse pair)."""
    for r in ratios:
        if r["phase"] != phase or r["ratio"] is None:
            continue
        if r["numerator"] == numerator and r["denominator"] == denominator:
            return dict(r)
        if r["numerator"] == denominator and r["denominator"] == numerator:
            return {
                **r,
                "numerator": numerator,
                "denominator": denominator,
                "ratio": 1 / r["ratio"],
                "low": 1 / r["high"] if r["high"] else None,
                "high": 1 / r["low"] if r["low"] else None,
                "per_trial": [1 / x for x in r["per_trial"]],
            }
    return None
