"""The synchronous scheduler and the pure models it owns, without threads or asyncio."""

from __future__ import annotations

import dataclasses

import pytest

from sift_server.engine import padding
from sift_server.engine.batch_queue import Caps
from sift_server.engine.forward_cost import ForwardCost
from sift_server.engine.policy import (
    AdaptivePolicy,
    Decision,
    Dispatch,
    Idle,
    ImmediatePolicy,
    SchedulerState,
    WaitUntil,
)
from sift_server.engine.returns import ReturnModel
from sift_server.engine.scheduler import Scheduler, SchedulerConfig
from sift_server.errors import QueueFull, ShuttingDown

MS = 0.001


def run(scheduler: Scheduler, now: float, seconds: float) -> list[str]:
    decision = scheduler.decide(now)
    assert isinstance(decision, Dispatch), decision
    batch = scheduler.take(decision, now)
    assert batch is not None
    return scheduler.complete(batch, now, now + seconds).finished


def test_admit_take_complete_returns_finished_requests() -> None:
    s = Scheduler(ImmediatePolicy())
    s.admit("a", [4, 4], 0.0)
    s.admit("b", [4], 0.0)
    assert s.queued_items == 3
    assert sorted(run(s, 0.0, 1 * MS)) == ["a", "b"]
    assert s.idle and s.forwards_run == 1


class CountingPolicy(ImmediatePolicy):
    """ImmediatePolicy that counts how often it is asked."""

    asked = 0

    def decide(self, state: SchedulerState, now: float) -> Decision:
        CountingPolicy.asked += 1
        return super().decide(state, now)


def test_while_a_forward_runs_the_scheduler_answers_idle_without_asking_the_policy() -> None:
    CountingPolicy.asked = 0
    s = Scheduler(CountingPolicy())
    s.admit("a", [4], 0.0)
    decision = s.decide(0.0)
    assert isinstance(decision, Dispatch) and CountingPolicy.asked == 1
    batch = s.take(decision, 0.0)
    assert batch is not None
    for k in range(5):  # arrivals during the forward
        s.admit(f"late{k}", [4], 0.001 * k)
        assert isinstance(s.decide(0.001 * k), Idle)
    assert CountingPolicy.asked == 1
    s.complete(batch, 0.0, 0.01)
    assert isinstance(s.decide(0.01), Dispatch) and CountingPolicy.asked == 2


def test_queue_bound_refuses_only_when_full_and_closing_refuses_everything() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(max_queue_items=4))
    s.admit("a", [1] * 3, 0.0)
    s.admit("big", [1] * 10, 0.0)  # room was left: a large request waits its turn
    with pytest.raises(QueueFull):
        s.admit("c", [1], 0.0)
    s.close()
    with pytest.raises(ShuttingDown):
        s.admit("d", [1], 0.0)
    assert s.decide(0.0) == Dispatch("default", "closing")


def test_abort_removes_a_split_request_in_any_state() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(caps=Caps(max_cost=8)))
    s.admit("big", [4] * 6, 0.0)
    batch = s.take(Dispatch("default", "lone"), 0.0)
    assert batch is not None and batch.items == 2
    assert s.abort("big")
    assert s.complete(batch, 0.0, 1 * MS).finished == []
    assert s.idle


def test_a_failed_forward_fails_the_rest_of_its_split_requests() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(caps=Caps(max_cost=8)))
    s.admit("big", [4] * 6, 0.0)
    batch = s.take(Dispatch("default", "lone"), 0.0)
    assert batch is not None
    done = s.complete(batch, 0.0, 1 * MS, ok=False)
    assert done.failed == ["big"] and s.idle


def test_expire_removes_requests_that_waited_past_the_deadline() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(queue_timeout=5.0))
    s.admit("old", [1], 0.0)
    s.admit("new", [1], 3.0)
    assert s.next_expiry() == 5.0
    assert s.expire(4.9) == []
    assert s.expire(5.1) == ["old"]
    assert s.next_expiry() == 8.0


def test_every_request_runs_within_its_position_whatever_the_lengths() -> None:
    # Under load caps of 64 tokens, one long text among many short ones.
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(caps=Caps(max_requests=4, max_cost=256)))
    s.admit("head", [10], 0.0)
    s.admit("long", [200], 0.0)
    for i in range(30):
        s.admit(f"s{i}", [10], 0.0)
    forwards = 0
    while "long" not in run(s, 0.0, 1 * MS):
        forwards += 1
    assert forwards <= 1


def test_returning_waves_are_learned_and_held_for_where_the_fixed_cost_pays() -> None:
    s = Scheduler(AdaptivePolicy(), SchedulerConfig())
    s.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])  # 9.6 ms fixed
    now = 0.0
    for _ in range(20):  # eight callers, each back 2 ms after its answer
        for i in range(8):
            s.header_arrived(now + 2 * MS + i * 0.1 * MS)
            s.ingress_ended()
            s.admit(f"r{now}.{i}", [16], now + 2 * MS + i * 0.1 * MS)
        now += 3 * MS
        decision = s.decide(now)
        assert isinstance(decision, Dispatch)
        batch = s.take(decision, now)
        assert batch is not None and len(batch.slices) == 8
        now += 20 * MS
        s.complete(batch, now - 20 * MS, now)
    # The next wave: two are back, six are coming; the worker waits for them.
    s.header_arrived(now + 1 * MS)
    s.ingress_ended()
    s.admit("first", [16], now + 1 * MS)
    decision = s.decide(now + 1 * MS)
    assert isinstance(decision, WaitUntil)
    assert decision.deadline <= now + 10 * MS


def test_return_model_ignores_random_arrivals() -> None:
    model = ReturnModel()
    now = 0.0
    for _ in range(40):
        model.forward_ended(now, 8)
        for k in range(8):  # spread evenly over the cycle: nothing comes back together
            model.observe(now + (k + 0.5) * 1.25 * MS)
        now += 10 * MS
    assert not model.reliable
    assert model.expected(now) == 0


def test_forward_cost_learns_the_fixed_part_and_refuses_to_guess() -> None:
    cost = ForwardCost()
    cost.observe(100, 0.015)
    assert cost.fixed is None  # one size says nothing about the intercept
    for tokens in (50, 100, 200, 400):
        cost.observe(tokens, 0.005 + tokens * 0.0001)
    assert cost.fixed == pytest.approx(0.005, rel=1e-6)
    assert cost.fixed_tokens == pytest.approx(50, rel=1e-6)


def test_padding_plan_cuts_a_long_text_out_of_a_short_batch_only_when_it_pays() -> None:
    short_and_long = [30, 28, 31, 250, 29]
    groups = padding.plan(short_and_long, fixed_tokens=36)
    assert [sorted(short_and_long[i] for i in g) for g in groups] == [[28, 29, 30, 31], [250]]
    assert padding.plan(short_and_long, fixed_tokens=None) == [[0, 1, 2, 3, 4]]
    assert padding.plan([30, 31, 29], fixed_tokens=36) == [[0, 1, 2]]
    assert padding.plan(short_and_long, fixed_tokens=10_000) == [[0, 1, 2, 3, 4]]


def _learn_waves(s: Scheduler, waves: int = 20, size: int = 8, costs: tuple[int, ...] = (16,)) -> float:
    """Drive ``waves`` closed-loop waves of ``size`` callers through ``s``; returns the time."""
    now = 0.0
    for w in range(waves):
        for i in range(size):
            at = now + 2 * MS + i * 0.1 * MS
            s.header_arrived(at)
            s.ingress_ended()
            s.admit(f"w{w}.{i}", [costs[i % len(costs)]], at)
        now += 3 * MS
        while s.queued_requests:
            decision = s.decide(now)
            if isinstance(decision, WaitUntil):
                now = decision.deadline
                continue
            assert isinstance(decision, Dispatch), decision
            batch = s.take(decision, now)
            assert batch is not None
            now += 20 * MS
            s.complete(batch, now - 20 * MS, now)
    return now


def test_a_returning_wave_runs_whole_past_the_load_caps_and_is_answered_together() -> None:
    config = SchedulerConfig(load_caps=Caps(max_cost=64))
    s = Scheduler(AdaptivePolicy(), config)
    s.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])
    assert not s.whole_waves  # nothing learned: the load caps hold
    now = _learn_waves(s, costs=(16, 40))
    assert s.waves.reliable and s.whole_waves
    for i in range(8):
        s.header_arrived(now + 2 * MS)
        s.ingress_ended()
        s.admit(f"last.{i}", [16 if i % 2 else 40], now + 2 * MS)
    decision = s.decide(now + 2 * MS)
    assert isinstance(decision, Dispatch)
    batch = s.take(decision, now + 2 * MS)
    assert batch is not None and len(batch.slices) == 8  # 224 tokens, past the 64-token load cap
    assert batch.deliver_together  # its sub-forwards, if any, answer when it ends


def eight_after_a_forward(now: float) -> Scheduler:
    """Eight 16-token requests admitted at ``now`` under a 64-token load cap, the last
    forward having ended at 0."""
    s = Scheduler(ImmediatePolicy(), SchedulerConfig(load_caps=Caps(max_cost=64)))
    s.last_forward_end = 0.0
    for i in range(8):
        s.admit(f"r{i}", [16], now)
    return s


def test_without_learned_waves_the_load_caps_cut_a_sustained_backlog_which_answers_together() -> None:
    # Early answers would send closed-loop clients back mid-forward and split the loop
    # into uneven groups before any wave was learned.
    s = eight_after_a_forward(0.0)
    batch = s.take(Dispatch("default", "backlog"), 0.0)
    assert batch is not None and len(batch.slices) == 4 and batch.deliver_together


def test_a_burst_after_idle_time_keeps_early_answers() -> None:
    s = eight_after_a_forward(1.0)
    batch = s.take(Dispatch("default", "burst-complete"), 1.0)
    assert batch is not None and not batch.deliver_together


def test_a_batch_says_which_requests_each_sub_forward_completes() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig())
    s.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])
    s.admit("short", [8], 0.0)
    s.admit("both", [8, 200], 0.0)
    s.admit("long", [200], 0.0)
    batch = s.take(Dispatch("default", "burst-complete"), 0.0)
    assert batch is not None and len(batch.chunks) == 2
    ids = [[batch.slices[k].pending.request_id for k in batch.answered(c)] for c in range(2)]
    assert [sorted(c) for c in ids] == [["short"], ["both", "long"]]  # "both" waits for its long item


def test_the_policy_reads_a_snapshot_of_the_arrival_model() -> None:
    s = Scheduler(AdaptivePolicy())
    s.header_arrived(0.0)
    state = s.state(0.0)
    s.header_arrived(1 * MS)
    assert state.arrivals.last_arrival == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.arrivals.last_arrival = 1.0  # type: ignore[misc]


def test_requests_answered_by_an_earlier_sub_forward_are_not_part_of_the_returning_wave() -> None:
    s = Scheduler(ImmediatePolicy(), SchedulerConfig())
    s.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])
    for i in range(3):
        s.admit(f"short{i}", [8], 0.0)
    s.admit("long", [200], 0.0)
    batch = s.take(Dispatch("default", "burst-complete"), 0.0)
    assert batch is not None and len(batch.chunks) == 2 and not batch.deliver_together
    s.answered_early(10 * MS, 3)  # the worker answered the short sub-forward
    assert len(s.complete(batch, 0.0, 15 * MS).finished) == 4
    # Two waves: the three short texts' clients, then "long"'s (answered at the end).
    assert [(wave.start, wave.size) for wave in s.waves.open] == [(10 * MS, 3), (15 * MS, 1)]
