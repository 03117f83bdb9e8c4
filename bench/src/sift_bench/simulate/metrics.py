"""Figures of one simulated run: queue delays, latencies, burst fusion, reasons."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sift_bench.report.stats import percentile  # one nearest-rank definition for bench and simulator
from sift_bench.simulate.engine_sim import SimResult
from sift_server.engine.policy import REASONS


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    family: str
    kind: str
    forward: str
    requests: int
    # Seconds.
    queue_p50: float
    queue_p95: float
    queue_p99: float
    queue_mean: float
    latency_mean: float
    latency_p95: float
    latency_p50: float
    latency_p90: float
    latency_p99: float
    latency_max: float
    # Requests per second over the scored part of the run.
    throughput: float
    forwards: int
    mean_batch: float
    bursts: int = 0
    forwards_per_burst: float = math.nan
    one_forward_share: float = math.nan
    # Most common split patterns, e.g. {"8": 38, "1+7": 2}.
    burst_patterns: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def tail_ratio(self) -> float:
        """Latency p99 / p50: how far the slowest requests fall behind the typical one."""
        return self.latency_p99 / self.latency_p50 if self.latency_p50 > 0 else math.nan


def summarize(result: SimResult) -> Summary:
    scored = [r for r in result.requests if r.scored]
    if not scored:
        raise ValueError(f"{result.family}: no scored requests")
    queue = [r.queue_delay for r in scored]
    latency = [r.latency for r in scored]
    span = max(r.end for r in scored) - min(r.arrival for r in scored)
    scored_ids = {r.request_id for r in scored}
    forwards = [f for f in result.forwards if scored_ids.intersection(f.request_ids)]
    reasons = Counter(f.reason for f in forwards)

    groups: dict[int, list[int]] = {}
    for request in scored:
        if request.group is not None:
            groups.setdefault(request.group, []).extend(request.forwards)
    patterns: Counter[str] = Counter()
    per_burst = []
    for forward_ids in groups.values():
        sizes = Counter(forward_ids)
        per_burst.append(len(sizes))
        patterns["+".join(str(sizes[f]) for f in sorted(sizes))] += 1

    return Summary(
        policy=result.policy,
        family=result.family,
        kind=result.kind,
        forward=result.forward,
        requests=len(scored),
        queue_p50=percentile(queue, 50),
        queue_p95=percentile(queue, 95),
        queue_p99=percentile(queue, 99),
        queue_mean=_mean(queue),
        latency_mean=_mean(latency),
        latency_p95=percentile(latency, 95),
        latency_p50=percentile(latency, 50),
        latency_p90=percentile(latency, 90),
        latency_p99=percentile(latency, 99),
        latency_max=max(latency),
        throughput=len(scored) / span if span > 0 else math.inf,
        forwards=len(forwards),
        mean_batch=_mean([f.size for f in forwards]),
        bursts=len(groups),
        forwards_per_burst=_mean(per_burst) if per_burst else math.nan,
        one_forward_share=(sum(1 for n in per_burst if n == 1) / len(per_burst)) if per_burst else math.nan,
        burst_patterns=dict(patterns.most_common(4)),
        reasons={reason: reasons[reason] for reason in REASONS if reasons[reason]},
    )
