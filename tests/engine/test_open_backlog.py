"""Independent users (an open loop): the return model learns that arrivals do not
follow answers, and a backlog then runs whole, in sub-forwards of the efficient size,
each answered as it ends; a learned burst is held no longer than anything else."""

from __future__ import annotations

import dataclasses

from sift_server.engine import padding
from sift_server.engine.arrivals import ArrivalView
from sift_server.engine.batch_queue import Caps
from sift_server.engine.policy import AdaptivePolicy, Dispatch, LaneView, SchedulerState, WaitUntil
from sift_server.engine.returns import ReturnModel
from sift_server.engine.scheduler import Scheduler, SchedulerConfig

MS = 0.001


def spread_arrivals(model: ReturnModel, forwards: int = 12) -> float:
    """Forwards of 4 every 10 ms, arrivals evenly every 2 ms: after each forward
    some arrive, but never closer together than the background rate explains."""
    now = 0.0
    for _ in range(forwards):
        model.forward_ended(now, 4)
        for k in range(5):
            model.observe(now + (k + 0.5) * 2 * MS)
        now += 10 * MS
    return now


def half_returning(model: ReturnModel, forwards: int = 12) -> None:
    """Every other wave comes back whole, the others spread out (a slow client
    before its waves are learned, or clusters of independent users that happen
    to follow a forward)."""
    now = 0.0
    for n in range(forwards):
        model.forward_ended(now, 4)
        for k in range(4 if n % 2 else 5):
            model.observe(now + (0.2 * k if n % 2 else (k + 0.5) * 2) * MS)
        now += 10 * MS


def test_spread_arrivals_after_forwards_are_learned_as_independent_and_a_closed_loop_is_not() -> None:
    open_loop = ReturnModel()
    assert not open_loop.independent  # nothing judged yet
    spread_arrivals(open_loop, forwards=5)
    assert open_loop.independent and not open_loop.clearly_independent  # too few judged for the strict test
    spread_arrivals(open_loop)
    assert open_loop.independent and open_loop.clearly_independent and not open_loop.reliable

    mixed = ReturnModel()
    half_returning(mixed)
    assert mixed.independent and not mixed.clearly_independent  # the waves that came back came back whole

    clusters = ReturnModel()
    now = 0.0
    for _ in range(12):  # after each forward of 8, a dense cluster of 3: users' bursts, not its clients
        clusters.forward_ended(now, 8)
        for k in range(3):
            clusters.observe(now + 1 * MS + k * 0.2 * MS)
        now += 20 * MS
    assert clusters.independent and clusters.clearly_independent and not clusters.reliable

    closed = ReturnModel()
    now = 0.0
    for _ in range(8):
        closed.forward_ended(now, 4)
        for k in range(4):  # all four come back within a millisecond
            closed.observe(now + 2 * MS + k * 0.2 * MS)
        now += 20 * MS
    assert closed.reliable and not closed.independent


def test_padding_within_cuts_a_group_in_order_at_the_budget() -> None:
    costs = [30, 30, 30, 30, 30, 300, 30]
    assert padding.within([0, 1, 2, 3, 4, 6], costs, 64) == [[0, 1], [2, 3], [4, 6]]
    assert padding.within([5, 0], costs, 64) == [[5], [0]]  # a row past the budget runs alone
    assert padding.within([0, 1, 2], costs, 1000) == [[0, 1, 2]]


def backlog(
    independent: bool, clearly: bool = True, *, server: bool = False, open_loop_rules: bool = False
) -> Scheduler:
    """Eight 16-token requests that queued behind a forward, under a 64-token load cap, on the
    simulator's ``adaptive-open`` scheduler (the open-loop rules; ``server``: the server's own,
    which keeps them off unless ``open_loop_rules``)."""
    from sift_bench.simulate.old_rules import ArmScheduler

    config = SchedulerConfig(load_caps=Caps(max_cost=64), open_loop_rules=open_loop_rules)
    s = Scheduler(AdaptivePolicy(), config) if server else ArmScheduler(AdaptivePolicy(), config, open_backlog=True)
    if independent:
        (spread_arrivals if clearly else half_returning)(s.waves)
    s.last_forward_end = 1.0
    for i in range(8):
        s.admit(f"r{i}", [16], 1.0)
    return s


def test_the_server_keeps_capped_batches_for_independent_users() -> None:
    # The open-loop rules are off on the server until measured cleanly (Scheduler.independent_arrivals).
    s = backlog(independent=True, server=True)
    assert not s.independent_arrivals and not s.open_backlog_rule
    batch = s.take(Dispatch("default", "backlog"), 1.0)
    assert batch is not None and len(batch.slices) == 4 and batch.deliver_together


def test_the_server_runs_the_open_loop_rules_when_its_setting_asks() -> None:
    s = backlog(independent=True, server=True, open_loop_rules=True)
    assert s.independent_arrivals and s.open_backlog_rule
    batch = s.take(Dispatch("default", "backlog"), 1.0)
    assert batch is not None and len(batch.slices) == 8 and not batch.deliver_together


def test_independent_users_backlog_runs_whole_in_efficient_sub_forwards_answered_early() -> None:
    capped = backlog(independent=False)
    batch = capped.take(Dispatch("default", "backlog"), 1.0)
    assert batch is not None and len(batch.slices) == 4 and batch.deliver_together

    s = backlog(independent=True)
    assert s.independent_arrivals
    batch = s.take(Dispatch("default", "backlog"), 1.0)
    assert batch is not None and len(batch.slices) == 8  # nobody left for a forward more
    assert [len(chunk) for chunk in batch.chunks] == [4, 4]  # each within the 64-token cap
    assert not batch.deliver_together
    assert [len(batch.answered(k)) for k in range(2)] == [4, 4]  # each sub-forward answers its own


def test_while_arrivals_are_only_loosely_independent_the_whole_backlog_runs_but_answers_together() -> None:
    # Half the waves came back: a closed loop answered early before its waves are
    # learned would fragment, so only the load caps give way to sub-forwards.
    s = backlog(independent=True, clearly=False)
    assert s.independent_arrivals and not s.open_backlog_rule
    batch = s.take(Dispatch("default", "backlog"), 1.0)
    assert batch is not None and len(batch.slices) == 8
    assert [len(chunk) for chunk in batch.chunks] == [4, 4]
    assert batch.deliver_together


def burst_state(independent: bool) -> SchedulerState:
    """A learned burst still arriving 20 ms after its head (a request in ingress)."""
    return SchedulerState(
        lanes=[LaneView("default", head_arrival=0.0, last_arrival=0.019, requests=12, fills_cap=False)],
        busy=False,
        last_forward_end=float("-inf"),
        ingress_pending=1,
        arrivals=ArrivalView(last_arrival=0.019, unseen_followers=1, expects_burst=True, follow_gap=0.002),
        independent_arrivals=independent,
    )


def test_a_learned_burst_is_held_past_max_hold_only_while_arrivals_are_not_known_independent() -> None:
    policy = AdaptivePolicy()
    assert policy.decide(burst_state(False), 0.020) == WaitUntil(policy.max_burst_hold)
    assert policy.decide(burst_state(True), 0.020) == Dispatch("default", "max-wait")


def test_known_independent_a_burst_being_read_is_held_at_most_about_one_forward() -> None:
    # A burst after idle time whose requests are still being read (headers in): on a CPU,
    # where a forward (120 ms) costs more than reading the burst, it still runs in one forward;
    # the hold never outlasts one forward's time.
    policy = AdaptivePolicy()
    state = dataclasses.replace(burst_state(True), last_forward_seconds=0.120)
    assert policy.decide(state, 0.020) == WaitUntil(0.120)
    assert policy.decide(state, 0.121) == Dispatch("default", "max-wait")
