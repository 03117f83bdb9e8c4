"""Event-loop correctness on small scenarios checked by hand.

Unless stated, the forward model is GPU-like F(n) = 8 ms + 0.15 ms * n,
ingress takes 0.15 ms per request and, as in the worker shell, a queued
request's stamp (head_arrival, last_arrival) is its admission time.
"""

from dataclasses import dataclass

import pytest

from sift_bench.simulate.engine_sim import EngineSim, SimResult, SimulationError, simulate
from sift_bench.simulate.forward_model import GPU_LIKE, LinearForward
from sift_bench.simulate.metrics import summarize
from sift_bench.simulate.traces import bursts, replay, sequential
from sift_server.engine.batch_queue import Caps
from sift_server.engine.policy import (
    AdaptivePolicy,
    Decision,
    ImmediatePolicy,
    SchedulerState,
    TimedPolicy,
    WaitUntil,
)

ING = 0.00015


def by_id(result: SimResult) -> dict[str, tuple[float, float, list[int]]]:
    return {r.request_id: (r.queue_delay, r.latency, r.forwards) for r in result.requests}


def test_immediate_splits_a_jittered_burst() -> None:
    # Second request arrives 0.5 ms after the first: the first is already running.
    result = simulate(ImmediatePolicy(), GPU_LIKE, replay([0.0, 0.0005], ingress=ING))
    assert [(f.size, f.reason) for f in result.forwards] == [(1, "lone"), (1, "backlog")]
    first, second = result.forwards
    assert first.start == pytest.approx(ING)
    assert first.end == pytest.approx(ING + GPU_LIKE(1))
    assert second.start == pytest.approx(first.end)  # drained the moment the executor is free
    rows = by_id(result)
    assert rows["p0"][0] == pytest.approx(0.0)
    assert rows["p0"][1] == pytest.approx(ING + GPU_LIKE(1))
    assert rows["p1"][0] == pytest.approx(first.end - (0.0005 + ING))
    assert rows["p1"][1] == pytest.approx(second.end - 0.0005)


def test_timed_fuses_a_burst_whose_jitter_is_inside_its_window() -> None:
    result = simulate(TimedPolicy(), GPU_LIKE, replay([0.0, 0.001, 0.002], ingress=ING))
    assert [(f.size, f.reason) for f in result.forwards] == [(3, "window")]
    # Quiet for 3 ms after the last admission (2.15 ms): earlier timers were replaced.
    assert result.forwards[0].start == pytest.approx(0.00515)


def test_timed_splits_a_burst_wider_than_its_window() -> None:
    result = simulate(TimedPolicy(), GPU_LIKE, replay([0.0, 0.0045], ingress=ING))
    # Like the reference, the window applies to work that queued behind a forward too.
    assert [(f.size, f.reason) for f in result.forwards] == [(1, "window"), (1, "window")]
    assert result.forwards[0].start == pytest.approx(0.00315)


def test_timed_max_wait_bounds_a_steady_trickle() -> None:
    times = [i * 0.002 for i in range(12)]  # never quiet for 3 ms
    result = simulate(TimedPolicy(max_wait=0.015), GPU_LIKE, replay(times, ingress=ING))
    assert result.forwards[0].reason == "max-wait"
    assert result.forwards[0].start == pytest.approx(0.01515)
    assert result.forwards[0].size == 8  # admitted at 0.15 .. 14.15 ms


def test_lone_sequential_requests_under_adaptive_never_queue() -> None:
    result = simulate(AdaptivePolicy(), GPU_LIKE, sequential(5, think_time=0.001, ingress=ING))
    assert [f.reason for f in result.forwards] == ["lone"] * 5
    assert all(r.queue_delay == 0.0 for r in result.requests)
    assert all(r.latency == pytest.approx(ING + GPU_LIKE(1)) for r in result.requests)
    starts = [r.arrival for r in result.requests]
    assert starts[1] == pytest.approx(ING + GPU_LIKE(1) + 0.001)


def test_adaptive_waits_for_requests_in_ingress() -> None:
    # Eight headers at once: the head is admitted while seven are still being read.
    result = simulate(AdaptivePolicy(), GPU_LIKE, replay([0.0] * 8, ingress=ING))
    assert [(f.size, f.reason) for f in result.forwards] == [(8, "burst-complete")]
    assert result.forwards[0].start == pytest.approx(8 * ING)


def test_adaptive_gives_up_at_max_hold() -> None:
    # Ingress so slow that the burst takes 17.6 ms to admit: the hold (for a
    # burst in the making, max_burst_hold) ends 10 ms after the head's admission (2.2 ms).
    result = simulate(AdaptivePolicy(max_burst_hold=0.010), GPU_LIKE, replay([0.0] * 8, ingress=0.0022))
    assert result.forwards[0].reason == "max-wait"
    assert result.forwards[0].start == pytest.approx(0.0122)
    assert result.forwards[0].size == 5  # admitted at 2.2, 4.4, 6.6, 8.8, 11 ms


def test_pending_time_changes_what_timed_sees() -> None:
    # 32 headers at once, admitted 0.15 ms apart over 4.8 ms.
    headers = simulate(TimedPolicy(), GPU_LIKE, replay([0.0] * 32, ingress=ING), pending_time="arrival")
    assert [f.size for f in headers.forwards] == [20, 12]  # quiet 3 ms after the headers
    admitted = simulate(TimedPolicy(), GPU_LIKE, replay([0.0] * 32, ingress=ING))
    assert [f.size for f in admitted.forwards] == [32]
    assert admitted.forwards[0].start == pytest.approx(32 * ING + 0.003)


def test_caps_split_a_large_burst_into_full_forwards() -> None:
    result = simulate(TimedPolicy(), GPU_LIKE, replay([0.0] * 10, ingress=ING), caps=Caps(max_requests=4))
    # The rest queued behind a forward of several: drained at once, as the reference does.
    assert [(f.size, f.reason) for f in result.forwards] == [(4, "full"), (4, "full"), (2, "backlog")]


def test_forward_time_counts_items() -> None:
    forward = LinearForward(a=0.001, b=0.001)
    result = simulate(ImmediatePolicy(), forward, replay([0.0], ingress=0.0))
    assert result.forwards[0].end - result.forwards[0].start == pytest.approx(0.002)


def test_burst_fusion_is_counted_per_burst() -> None:
    client = bursts(size=8, count=4, jitter_max=0.0, idle_gap=0.05, seed=0, ingress=ING, warmup=1)
    immediate = summarize(simulate(ImmediatePolicy(), GPU_LIKE, client))
    assert immediate.bursts == 3
    assert immediate.forwards_per_burst == 2.0
    assert immediate.one_forward_share == 0.0
    assert immediate.burst_patterns == {"1+7": 3}
    client = bursts(size=8, count=4, jitter_max=0.0, idle_gap=0.05, seed=0, ingress=ING, warmup=1)
    adaptive = summarize(simulate(AdaptivePolicy(), GPU_LIKE, client))
    assert adaptive.one_forward_share == 1.0
    assert adaptive.reasons == {"burst-complete": 3}


def test_closed_loop_bursts_wait_for_the_previous_burst() -> None:
    client = bursts(size=2, count=3, jitter_max=0.0, idle_gap=0.05, seed=0, ingress=ING, warmup=0)
    result = simulate(AdaptivePolicy(), GPU_LIKE, client)
    by_group: dict[int, list[float]] = {}
    for r in result.requests:
        assert r.group is not None
        by_group.setdefault(r.group, []).append(r.end)
    for group in (1, 2):
        release = min(r.arrival for r in result.requests if r.group == group)
        assert release == pytest.approx(max(by_group[group - 1]) + 0.05)


def test_header_arrivals_do_not_wake_the_worker() -> None:
    def decisions(wake_on_header: bool) -> int:
        sim = EngineSim(TimedPolicy(), GPU_LIKE, replay([0.0, 0.001], ingress=ING), wake_on_header=wake_on_header)
        return sim.run().decisions

    # Admissions and forward ends decide (and timers: 2 admissions, 1 timer, 1 end);
    # header arrivals add one decision each only when asked to.
    assert decisions(False) == 4
    assert decisions(True) == 6


def test_runs_are_deterministic() -> None:
    def run() -> list[tuple[str, float, float]]:
        client = bursts(size=8, count=10, jitter_max=0.003, idle_gap=0.02, seed=5)
        result = simulate(AdaptivePolicy(), GPU_LIKE, client)
        return [(r.request_id, r.start, r.end) for r in result.requests]

    assert run() == run()


@dataclass(frozen=True)
class SpinningPolicy:
    name: str = "spin"

    def decide(self, state: SchedulerState, now: float) -> Decision:
        return WaitUntil(now)


def test_a_policy_that_would_spin_is_an_error() -> None:
    with pytest.raises(SimulationError, match="spin"):
        EngineSim(SpinningPolicy(), GPU_LIKE, replay([0.0])).run()


@dataclass(frozen=True)
class NeverPolicy:
    name: str = "never"

    def decide(self, state: SchedulerState, now: float) -> Decision:
        return WaitUntil(now + 1.0)


def test_a_policy_that_never_dispatches_is_caught() -> None:
    with pytest.raises(SimulationError):
        EngineSim(NeverPolicy(), GPU_LIKE, replay([0.0]), max_events=100).run()
