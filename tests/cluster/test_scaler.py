"""The local scaler's policy (cluster.scaler), decided from explicit values and a clock."""

from __future__ import annotations

import pytest

from sift_server.cluster.scaler import ScalePolicy, ScaleState, wanted_workers

POLICY = ScalePolicy(min_workers=0, max_workers=4, backlog_per_worker=32, idle_s=60.0)


def test_one_waiting_request_wakes_a_pool_at_zero() -> None:
    wanted, state = wanted_workers(POLICY, ScaleState(last_busy=0.0), running=0, backlog=1, now=10.0)
    assert wanted == 1 and state.last_busy == 10.0


def test_up_in_one_step_to_the_backlog_s_share_and_no_further_than_the_maximum() -> None:
    assert wanted_workers(POLICY, ScaleState(0.0), running=1, backlog=65, now=1.0)[0] == 3  # ceil(65 / 32)
    assert wanted_workers(POLICY, ScaleState(0.0), running=0, backlog=10_000, now=1.0)[0] == 4


def test_never_down_while_there_is_backlog() -> None:
    # 3 workers (one still loading, say) and a backlog one could absorb: keep them all.
    assert wanted_workers(POLICY, ScaleState(0.0), running=3, backlog=5, now=500.0)[0] == 3


def test_down_to_the_minimum_only_after_idle_s_without_backlog() -> None:
    policy = ScalePolicy(min_workers=1, max_workers=4, idle_s=60.0)
    state = ScaleState(last_busy=100.0)
    assert wanted_workers(policy, state, running=3, backlog=0, now=159.9) == (3, state)  # a short lull
    assert wanted_workers(policy, state, running=3, backlog=0, now=160.0) == (1, state)
    # Busy again within the idle time: the clock restarts.
    _, busy = wanted_workers(policy, state, running=3, backlog=2, now=150.0)
    assert wanted_workers(policy, busy, running=3, backlog=0, now=200.0)[0] == 3
    assert wanted_workers(policy, busy, running=3, backlog=0, now=210.0)[0] == 1


def test_a_pool_below_its_minimum_is_brought_up_to_it() -> None:
    policy = ScalePolicy(min_workers=2, max_workers=4)
    assert wanted_workers(policy, ScaleState(0.0), running=0, backlog=0, now=1.0)[0] == 2  # one died


@pytest.mark.parametrize("bounds", [(3, 2), (-1, 2), (0, 0)])
def test_impossible_bounds_are_refused(bounds: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        ScalePolicy(*bounds)
