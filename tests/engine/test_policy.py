"""Deterministic policy tests: explicit state, a fake clock, no event loop."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from sift_server.engine.arrivals import ArrivalModel
from sift_server.engine.batch_queue import BatchQueue, Caps, Pending
from sift_server.engine.clock import FakeClock
from sift_server.engine.policy import (
    AdaptivePolicy,
    Dispatch,
    Idle,
    ImmediatePolicy,
    LaneView,
    Policy,
    SchedulerState,
    TimedPolicy,
    WaitUntil,
)

MS = 0.001


@dataclass
class Harness:
    """A minimal scheduler around a policy, driven by hand."""

    policy: Policy
    clock: FakeClock = field(default_factory=FakeClock)
    arrivals: ArrivalModel = field(default_factory=ArrivalModel)
    queues: dict[str, BatchQueue] = field(default_factory=dict)
    caps: Caps = field(default_factory=Caps)
    busy: bool = False
    last_forward_end: float = float("-inf")
    ingress: int = 0
    closing: bool = False

    def arrive(self, rid: str, lane: str = "default", costs: tuple[int, ...] = (8,)) -> None:
        now = self.clock()
        self.arrivals.observe(now)
        self.queues.setdefault(lane, BatchQueue(lane)).add(Pending(rid, list(costs), now))

    def headers(self, n: int = 1) -> None:
        """Headers of ``n`` requests arrive now; they stay in ingress."""
        for _ in range(n):
            self.arrivals.observe(self.clock())
        self.ingress += n

    def state(self) -> SchedulerState:
        lanes = [
            LaneView(q.lane, q.pending[0].arrival, q.pending[-1].arrival, len(q), q.would_fill(self.caps))
            for q in self.queues.values()
            if q.pending
        ]
        return SchedulerState(lanes, self.busy, self.last_forward_end, self.ingress, self.arrivals.view(), self.closing)

    def decide(self):  # type: ignore[no-untyped-def]
        return self.policy.decide(self.state(), self.clock())

    def dispatch(self, decision: Dispatch) -> list[str]:
        taken = self.queues[decision.lane].take(self.caps)
        return [s.pending.request_id for s in taken]

    def run_forward(self, duration: float) -> None:
        self.busy = True
        self.clock.advance(duration)
        self.busy = False
        self.last_forward_end = self.clock()

    def settle(self) -> list[tuple[str, list[str]]]:
        """Advance through waits and dispatches until idle; returns (reason, ids) per forward."""
        forwards = []
        while True:
            decision = self.decide()
            if isinstance(decision, Dispatch):
                forwards.append((decision.reason, self.dispatch(decision)))
                self.run_forward(1 * MS)
            elif isinstance(decision, WaitUntil):
                self.clock.now = decision.deadline
            else:
                return forwards


def burst(h: Harness, size: int, gap: float, prefix: str) -> None:
    for i in range(size):
        if i:
            h.clock.advance(gap)
        h.arrive(f"{prefix}{i}")


def served_burst(h: Harness, size: int, prefix: str) -> None:
    """A burst of ``size`` 0.2 ms apart, served to the end, then 50 ms of quiet."""
    burst(h, size, 0.2 * MS, prefix)
    h.settle()
    h.clock.advance(50 * MS)


def test_immediate_dispatches_a_lone_request_without_waiting() -> None:
    h = Harness(ImmediatePolicy())
    h.arrive("a")
    assert h.decide() == Dispatch("default", "lone")


def test_timed_waits_for_quiet_window_then_dispatches() -> None:
    h = Harness(TimedPolicy(idle_coalesce=3 * MS, max_wait=15 * MS))
    h.arrive("a")
    assert h.decide() == WaitUntil(3 * MS)
    h.clock.advance(1 * MS)
    h.arrive("b")
    assert h.decide() == WaitUntil(4 * MS)
    h.clock.now = 4 * MS
    assert h.decide() == Dispatch("default", "window")


def test_timed_is_bounded_by_max_wait() -> None:
    h = Harness(TimedPolicy(idle_coalesce=3 * MS, max_wait=5 * MS))
    for _ in range(4):
        h.arrive("x")
        h.clock.advance(2 * MS)
    assert h.decide() == Dispatch("default", "max-wait")


def test_busy_executor_means_no_decision_until_it_is_free() -> None:
    h = Harness(AdaptivePolicy())
    h.arrive("a")
    h.busy = True
    assert h.decide() == Idle()


def test_adaptive_sequential_traffic_dispatches_each_request_at_once() -> None:
    h = Harness(AdaptivePolicy())
    for i in range(20):
        h.arrive(f"r{i}")
        assert h.decide() == Dispatch("default", "lone"), i
        h.dispatch(Dispatch("default", "lone"))
        h.run_forward(3 * MS)
        h.clock.advance(1 * MS)  # client think time


def test_adaptive_learns_a_burst_and_fuses_the_next_one_whole() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    # First burst of 8 after sequential history: nothing predicts it, it may split.
    served_burst(h, 8, "a")
    # The second burst: the model expects 8, and once the 8th arrived waits only
    # ``follow_gap`` for a ninth (a burst may be bigger than the last one).
    for i in range(8):
        if i:
            h.clock.advance(0.2 * MS)
        h.arrive(f"b{i}")
        decision = h.decide()
        assert isinstance(decision, WaitUntil), (i, decision)
    assert decision.deadline == pytest.approx(h.clock() + h.arrivals.follow_gap)
    assert h.arrivals.follow_gap < 2 * MS
    h.clock.now = decision.deadline
    decision = h.decide()
    assert decision == Dispatch("default", "burst-complete")
    assert len(h.dispatch(decision)) == 8


def test_adaptive_bursts_with_jitter_each_run_as_one_forward_after_the_first() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    gaps = [0.1, 0.4, 0.05, 0.3, 0.2, 0.35, 0.15]  # jittered arrivals inside a burst
    shapes = []
    for b in range(5):
        for i in range(8):
            if i:
                h.clock.advance(gaps[(i + b) % len(gaps)] * MS)
            h.arrive(f"{b}-{i}")
            decision = h.decide()
            if isinstance(decision, Dispatch):
                h.dispatch(decision)
                shapes.append(decision.reason)
                h.run_forward(0.01 * MS)
        shapes.extend(reason for reason, _ in h.settle())
        h.clock.advance(50 * MS)
    # After the first burst taught the size, every burst is one forward.
    assert shapes[-4:] == ["burst-complete"] * 4


def test_adaptive_smaller_burst_than_predicted_ends_on_the_quiet_gap() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    served_burst(h, 8, "a")
    burst(h, 3, 0.2 * MS, "b")
    decision = h.decide()
    assert isinstance(decision, WaitUntil)
    # One burst of regular 0.2 ms gaps seen: 8 x its mean gap, under the link gap.
    assert h.arrivals.follow_gap == pytest.approx(1.6 * MS)
    assert decision.deadline == pytest.approx(h.clock() + 1.6 * MS)
    h.clock.now = decision.deadline
    decision = h.decide()
    assert decision == Dispatch("default", "window")
    assert len(h.dispatch(decision)) == 3


def test_adaptive_waits_while_requests_are_in_ingress() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS, max_burst_hold=50 * MS))
    # Three headers at once (too dense for chance): one admitted, two being read.
    # A burst in the making may take up to max_burst_hold to arrive.
    h.arrive("a")
    h.headers(2)
    assert h.decide() == WaitUntil(50 * MS)
    h.ingress = 0
    assert h.decide() == Dispatch("default", "lone")


def test_adaptive_hold_is_bounded() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    h.arrive("a")
    h.ingress = 1
    h.clock.advance(10 * MS)
    assert h.decide() == Dispatch("default", "max-wait")


def test_work_that_queued_behind_a_forward_runs_at_once() -> None:
    for policy in (AdaptivePolicy(), ImmediatePolicy()):
        h = Harness(policy)
        h.arrive("a")
        h.busy = True
        h.clock.advance(1 * MS)
        h.arrive("b")
        h.run_forward(2 * MS)
        assert h.decide() == Dispatch("default", "backlog"), policy.name


def test_timed_applies_its_window_to_work_that_queued_behind_a_forward() -> None:
    # The reference waits for quiet after every forward: that collects a returning wave.
    h = Harness(TimedPolicy())
    h.arrive("a")
    h.busy = True
    h.clock.advance(1 * MS)
    h.arrive("b")
    h.run_forward(2 * MS)
    assert h.decide() == WaitUntil(4 * MS)


def test_full_batch_dispatches_without_waiting() -> None:
    h = Harness(TimedPolicy(), caps=Caps(max_requests=4))
    for i in range(4):
        h.arrive(f"r{i}")
    assert h.decide() == Dispatch("default", "full")


def test_closing_dispatches_everything() -> None:
    h = Harness(TimedPolicy())
    h.arrive("a")
    h.closing = True
    assert h.decide() == Dispatch("default", "closing")


def test_lanes_are_served_oldest_head_first_so_none_starves() -> None:
    h = Harness(ImmediatePolicy(), caps=Caps(max_requests=1))
    h.arrive("base-0", lane="base")
    h.clock.advance(MS)
    h.arrive("lora-0", lane="lora-a")
    h.clock.advance(MS)
    h.arrive("base-1", lane="base")
    order = [ids[0] for _, ids in h.settle()]
    assert order == ["base-0", "lora-0", "base-1"]


def test_arrival_model_predicts_lone_traffic_from_sequential_history() -> None:
    model = ArrivalModel(link_gap=2 * MS)
    for i in range(5):
        model.observe(i * 10 * MS)
    assert model.expected_size == 1
    for i in range(6):
        model.observe(100 * MS + i * 0.1 * MS)
    model.observe(200 * MS)
    assert model.expected_size == 6
    assert 0.2 * MS <= model.follow_gap <= 2 * MS


def random_background(h: Harness, n: int = 64, gap: float = 3 * MS) -> None:
    """Arrivals of overlapping random traffic already served (only the arrival model sees them)."""
    for _ in range(n):
        h.arrivals.observe(h.clock())
        h.clock.advance(gap)


def test_adaptive_does_not_hold_a_head_for_a_chance_follower_in_ingress() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    random_background(h)
    h.clock.advance(6 * MS)  # an isolated head, as one random arrival in five is at 333 req/s
    h.arrive("a")
    h.clock.advance(0.3 * MS)
    h.headers(1)
    assert not h.arrivals.expects_burst
    assert h.decide() == Dispatch("default", "lone")


def test_adaptive_does_not_hold_for_companions_that_already_ran() -> None:
    # Random traffic: a arrives and runs; b joins a's cluster during the
    # forward and drains; c joins the same cluster on an idle worker. The
    # cluster has 3 arrivals but nobody else is coming: c runs at once.
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    random_background(h)
    h.clock.advance(1 * MS)
    h.arrive("a")
    assert h.decide() == Dispatch("default", "lone")
    h.dispatch(Dispatch("default", "lone"))
    h.busy = True
    h.clock.advance(1 * MS)
    h.arrive("b")
    h.run_forward(0.5 * MS)
    assert h.decide() == Dispatch("default", "backlog")
    h.dispatch(Dispatch("default", "backlog"))
    h.run_forward(0.2 * MS)
    h.clock.advance(0.1 * MS)
    h.arrive("c")
    assert h.arrivals.cluster_size == 3
    assert h.decide() == Dispatch("default", "lone")


def test_adaptive_holds_a_burst_bigger_than_learned_until_it_goes_quiet() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    for b in range(3):
        served_burst(h, 8, f"a{b}-")
    assert h.arrivals.expected_size == 8
    # A burst of 12: its 9th arrival came before the 8th was dispatched.
    burst(h, 12, 0.2 * MS, "b")
    decision = h.decide()
    assert isinstance(decision, WaitUntil)
    assert decision.deadline == pytest.approx(h.clock() + h.arrivals.follow_gap)
    h.clock.now = decision.deadline
    decision = h.decide()
    assert decision == Dispatch("default", "burst-complete")
    assert len(h.dispatch(decision)) == 12
    h.run_forward(1 * MS)
    h.clock.advance(50 * MS)
    # The next burst of 12 was learned: dispatched once it is complete and quiet.
    burst(h, 12, 0.2 * MS, "c")
    decision = h.decide()
    assert isinstance(decision, WaitUntil)
    h.clock.now = decision.deadline
    assert h.decide() == Dispatch("default", "burst-complete")


def test_adaptive_does_not_cut_a_bigger_burst_at_the_learned_size() -> None:
    # A closed loop of 32 starting after bursts of 8 were learned: its requests are read
    # one after the other, and the worker decides at each admission. Before, the first 8
    # ran as a complete burst and the other 24 waited a whole forward.
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    for b in range(3):
        served_burst(h, 8, f"a{b}-")
    forwards = []
    for i in range(32):
        if i:
            h.clock.advance(0.2 * MS)
        h.arrive(f"c{i}")
        decision = h.decide()
        if isinstance(decision, Dispatch):
            forwards.append(len(h.dispatch(decision)))
            h.run_forward(1 * MS)
    forwards.extend(len(ids) for _, ids in h.settle())
    assert forwards == [32]


def test_adaptive_hold_that_outlives_the_cluster_is_labelled_window() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    served_burst(h, 8, "a")
    h.arrive("lone")  # predicted to be the head of a burst of 8
    decision = h.decide()
    assert isinstance(decision, WaitUntil)
    # Woken late, after the cluster went quiet: still the hold's end, not a lone dispatch.
    h.clock.now = decision.deadline + 2 * MS
    assert h.decide() == Dispatch("default", "window")


def test_on_a_shared_core_backlog_waits_for_requests_being_read_within_max_hold() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS))
    h.arrive("a")
    h.busy = True
    h.clock.advance(1 * MS)
    h.arrive("b")
    h.run_forward(2 * MS)
    h.headers(2)
    end = h.clock()
    shared = replace(h.state(), shared_core=True)
    assert h.policy.decide(shared, h.clock()) == WaitUntil(end + 10 * MS)
    assert h.decide() == Dispatch("default", "backlog")  # not shared: at once
    h.clock.advance(10 * MS)
    assert h.policy.decide(replace(h.state(), shared_core=True), h.clock()) == Dispatch("default", "backlog")


def test_on_a_shared_core_backlog_waits_until_a_returning_wave_goes_quiet() -> None:
    # Closed-loop clients answered by the last forward are still coming back when it
    # ends; on one shared core their reading would interleave with the next forward.
    h = Harness(AdaptivePolicy(max_hold=10 * MS, backlog_quiet=3 * MS))
    h.arrive("a")
    h.busy = True
    h.clock.advance(5 * MS)
    h.arrive("b")  # returned during the forward
    h.run_forward(1 * MS)
    end = h.clock()
    shared = replace(h.state(), shared_core=True)
    assert h.policy.decide(shared, h.clock()) == WaitUntil(end + 2 * MS)  # 3 ms after b
    h.clock.advance(1.5 * MS)
    h.arrive("c")
    assert h.policy.decide(replace(h.state(), shared_core=True), h.clock()) == WaitUntil(h.clock() + 3 * MS)
    h.clock.advance(3 * MS)
    decision = h.policy.decide(replace(h.state(), shared_core=True), h.clock())
    assert decision == Dispatch("default", "backlog")
    assert h.dispatch(decision) == ["a", "b", "c"]


def test_on_a_shared_core_a_wave_that_keeps_trickling_is_bounded_by_max_hold() -> None:
    h = Harness(AdaptivePolicy(max_hold=10 * MS, backlog_quiet=3 * MS))
    h.arrive("a")
    h.run_forward(1 * MS)
    end = h.clock()
    for i in range(4):  # a return every 2 ms: never quiet for 3
        h.clock.advance(2 * MS)
        h.arrive(f"r{i}")
        decision = h.policy.decide(replace(h.state(), shared_core=True), h.clock())
        assert isinstance(decision, WaitUntil) and decision.deadline <= end + 10 * MS
    h.clock.now = end + 10 * MS
    assert h.policy.decide(replace(h.state(), shared_core=True), h.clock()) == Dispatch("default", "backlog")


def test_adaptive_holds_a_lone_user_after_learned_bursts_only_until_a_follower_is_overdue() -> None:
    # Bursts of 8 with one 20 ms pause inside (a busy core reading them) teach a 40 ms follow
    # gap and a pace of 3 ms per follower; the follow gap alone held a lone user after them
    # for as long as users kept coming within it.
    h = Harness(AdaptivePolicy(max_hold=10 * MS), arrivals=ArrivalModel(busy_link_gap=0.050))
    for b in range(3):
        for i in range(8):
            if i:
                h.clock.advance(20 * MS if i == 4 else 0.2 * MS)
            h.arrive(f"{b}-{i}")
        h.settle()
        h.clock.advance(1.0)
    assert h.arrivals.expected_size == 8 and h.arrivals.follow_gap == pytest.approx(40 * MS)
    assert h.arrivals.pace == pytest.approx(21.2 * MS / 7)
    h.arrivals.observe(h.clock(), in_flight=False)
    h.queues.setdefault("default", BatchQueue("default")).add(Pending("user", [8], h.clock()))
    decision = h.decide()
    # The next request of a burst like the learned ones would be in by link gap + 4 paces.
    assert decision == WaitUntil(pytest.approx(h.clock() + 2 * MS + 4 * 21.2 * MS / 7))
    h.clock.now = decision.deadline
    assert h.decide() == Dispatch("default", "window")
