"""The arrival model on hand-written timestamps: what counts as a burst, what
is learned from it, and how long a burst may still grow."""

from __future__ import annotations

import math

import pytest

from sift_server.engine.arrivals import ArrivalModel, poisson_tail

MS = 0.001


def stream(model: ArrivalModel, start: float, gap: float, n: int, *, in_flight: bool = True) -> float:
    """``n`` arrivals ``gap`` apart from ``start``; returns the last arrival time."""
    t = start
    for i in range(n):
        t = start + i * gap
        model.observe(t, in_flight=in_flight)
    return t


def burst(model: ArrivalModel, start: float, gaps: list[float]) -> float:
    """A burst: its head finds nothing in flight, followers arrive ``gaps`` apart."""
    model.observe(start, in_flight=False)
    t = start
    for gap in gaps:
        t += gap
        model.observe(t)
    return t


def test_poisson_tail() -> None:
    assert poisson_tail(0, 3.0) == 1.0
    assert poisson_tail(3, 0.0) == 0.0
    assert poisson_tail(1, 0.5) == pytest.approx(1 - math.exp(-0.5))
    assert poisson_tail(2, 0.5) == pytest.approx(1 - math.exp(-0.5) * 1.5)
    assert poisson_tail(2, math.inf) == 1.0
    # Summed outward from k, above and below the mean, long clusters included.
    for k, mu in [(40, 20.0), (1000, 1000.0), (5, 30.0), (300, 250.0)]:
        below = sum(math.exp(-mu + i * math.log(mu) - math.lgamma(i + 1)) for i in range(k))
        assert poisson_tail(k, mu) == pytest.approx(1 - below, rel=1e-9)


def test_chance_cluster_under_random_traffic_teaches_lone_traffic() -> None:
    model = ArrivalModel()
    # Background: 64 arrivals 3 ms apart that overlap earlier work (333 req/s).
    last = stream(model, 0.0, 3 * MS, 64)
    # After 6 ms of quiet, three arrivals within 1 ms: at 333 req/s two
    # followers within 1 ms happen by chance about once in 23 heads.
    last = stream(model, last + 6 * MS, 0.5 * MS, 3)
    assert model.cluster_isolated and not model.cluster_is_burst
    model.observe(last + 10 * MS)
    assert model.expected_size == 1
    assert model.unseen_followers == 0


def test_dense_cluster_is_a_burst_even_over_random_traffic() -> None:
    model = ArrivalModel()
    last = stream(model, 0.0, 3 * MS, 64)
    last = burst(model, last + 6 * MS, [0.2 * MS] * 7)
    assert model.cluster_is_burst
    model.observe(last + 50 * MS, in_flight=False)
    assert model.expected_size == 8
    assert model.unseen_followers == 7


def test_fast_sequential_traffic_does_not_hide_the_next_burst() -> None:
    # 400 req/s one at a time (each request finished before the next arrived),
    # then, 6 ms later, a burst of 8 over 2.8 ms.
    sequential = ArrivalModel()
    last = stream(sequential, 0.0, 2.5 * MS, 64, in_flight=False)
    burst(sequential, last + 6 * MS, [0.4 * MS] * 7)
    assert sequential.cluster_is_burst
    # The same timestamps from overlapping (random) traffic: 8 in 2.8 ms at
    # 390 req/s is a 1-in-7,000 chance, not rare enough to learn from.
    overlapping = ArrivalModel()
    last = stream(overlapping, 0.0, 2.5 * MS, 64)
    burst(overlapping, last + 6 * MS, [0.4 * MS] * 7)
    assert not overlapping.cluster_is_burst


def test_sequential_traffic_predicts_no_followers() -> None:
    model = ArrivalModel()
    for i in range(100):
        model.observe(i * 1.85 * MS, in_flight=False)
        assert model.unseen_followers == 0
        assert not model.expects_burst
    assert model.expected_size == 1


def test_followers_of_an_isolated_cluster_after_learned_bursts() -> None:
    model = ArrivalModel()
    last = burst(model, 0.0, [0.2 * MS] * 7)
    last = burst(model, last + 50 * MS, [0.2 * MS] * 4)
    assert model.unseen_followers == 3  # 5 of the 8 learned have arrived
    assert model.expects_burst
    assert not model.at_learned_size
    last = stream(model, last + 0.2 * MS, 0.2 * MS, 3)
    # The learned size: complete once quiet, but it may be a bigger burst: one more is
    # expected until it goes quiet.
    assert model.at_learned_size
    assert model.unseen_followers == 1
    model.observe(last + 0.2 * MS)
    # Bigger than learned: its size is unknown, one more is expected until it goes quiet.
    assert model.unseen_followers == 1
    # A cluster that did not follow a quiet spell predicts nothing.
    model.observe(last + 3 * MS)
    assert not model.cluster_isolated
    assert model.unseen_followers == 0


def test_follow_gap_is_generous_after_one_burst_and_tightens_with_more() -> None:
    model = ArrivalModel()
    # The simulator's bursts8-jit2ms warm-up burst: widest gap 0.234 ms.
    gaps = [0.218, 0.13, 0.094, 0.156, 0.048, 0.062, 0.234]
    last = burst(model, 0.0, [g * MS for g in gaps])
    # The next burst's head closes it. That next burst had a 0.934 ms gap:
    # twice the widest (0.468 ms) would have cut it; eight times the mean
    # gap (1.08 ms) does not.
    last += 50 * MS
    model.observe(last, in_flight=False)
    assert model.follow_gap == pytest.approx(8 * sum(gaps) / 7 * MS)
    assert model.follow_gap > 0.934 * MS
    # With eight regular bursts remembered, twice the widest gap rules.
    last = stream(model, last + 0.2 * MS, 0.2 * MS, 7)
    for _ in range(8):
        last = burst(model, last + 50 * MS, [0.2 * MS] * 7)
    assert len(model.recent_bursts) == 8
    assert model.follow_gap == pytest.approx(0.4 * MS)


def test_first_cluster_of_a_models_life_is_a_burst() -> None:
    # No history: nothing says the traffic is random.
    model = ArrivalModel()
    burst(model, 0.0, [0.0] * 7)
    assert model.cluster_is_burst


def test_independent_arrivals_after_learned_bursts_stop_being_held_for_one() -> None:
    # Bursts of 8 within 3.5 ms teach a burst of 8; then, after a quiet spell, users arrive on
    # their own every 30 ms, each finding the one before still queued (the server's 50 ms link).
    model = ArrivalModel(busy_link_gap=0.050)
    t = 0.0
    for _ in range(3):
        t = burst(model, t + 1.0, [0.5 * MS] * 7)
    assert model.expected_size == 8
    model.observe(t + 1.0, in_flight=False)
    assert model.expects_burst and model.unseen_followers == 7  # a lone head: maybe the next burst
    last = t + 1.0
    for _ in range(4):
        last += 30 * MS
        model.observe(last)
    # 30 ms gaps: far slower than any learned burst, and too sparse to be one by chance.
    assert not model.cluster_is_burst
    assert model.behind_pace(last)
    assert not model.expects_burst and model.unseen_followers == 0


def test_a_burst_as_slow_as_the_learned_ones_is_still_awaited() -> None:
    model = ArrivalModel(busy_link_gap=0.050)
    t = 0.0
    for _ in range(3):
        t = burst(model, t + 1.0, [4 * MS] * 7)  # a slow client: 8 requests over 28 ms
    t = burst(model, t + 1.0, [4 * MS] * 3)
    assert not model.behind_pace(t)
    assert model.expects_burst and model.unseen_followers == 4
    # Even with one gap twice the learned ones: the pace is judged over the whole cluster.
    model.observe(t + 8 * MS)
    assert not model.behind_pace(t + 8 * MS) and model.unseen_followers == 3


def learned_bursts_of_32(model: ArrivalModel) -> float:
    """Three bursts of 32, each read over 15.5 ms (0.5 ms apart), one second apart."""
    t = 0.0
    for _ in range(3):
        t = burst(model, t + 1.0, [0.5 * MS] * 31)
    return t


def test_a_lone_user_after_learned_bursts_is_awaited_only_while_a_burst_would_have_come() -> None:
    # The live case after a closed loop of 32: the model expects the next isolated cluster
    # to be a burst of 32, and a user arrives on their own.
    model = ArrivalModel(busy_link_gap=0.050)
    t = learned_bursts_of_32(model) + 0.5
    assert model.pace == pytest.approx(0.5 * MS)
    model.observe(t, in_flight=False)
    assert model.unseen_followers == 31
    # A burst like the learned ones would have sent its next request within 4 x 0.5 ms, after
    # the link gap; with none by then, the prediction is dropped whatever the follow gap.
    assert model.follower_due == pytest.approx(t + 2 * MS + 4 * 0.5 * MS)
    assert model.view().follower_due == model.follower_due
    assert not model.behind_pace(t + 3.9 * MS)
    assert model.behind_pace(t + 4.1 * MS)
    # The next user, 20 ms later, joins the cluster (something is in flight) but came late:
    # from then on the cluster predicts no followers.
    model.observe(t + 20 * MS)
    assert model.cluster_behind and not model.cluster_is_burst
    assert model.unseen_followers == 0 and not model.expects_burst
    assert model.view().follower_due == math.inf


def test_followers_at_the_learned_pace_keep_the_prediction() -> None:
    model = ArrivalModel(busy_link_gap=0.050)
    t = learned_bursts_of_32(model) + 0.5
    t = burst(model, t, [1.0 * MS] * 15)  # twice as slow as learned: within four paces each
    assert not model.cluster_behind and model.unseen_followers == 16
    assert model.follower_due == pytest.approx(t - 15 * MS + 2 * MS + 4 * 0.5 * MS * 16)


def test_a_prediction_holds_no_request_longer_than_the_learned_bursts_took() -> None:
    # Whatever arrives, a cluster smaller than the learned burst is awaited at most the link
    # gap plus outlive_factor times the slowest learned burst's span after its head.
    model = ArrivalModel(busy_link_gap=0.050)
    t = learned_bursts_of_32(model) + 0.5
    head = t
    t = burst(model, t, [2 * MS] * 30)  # 31 of 32, each just in time
    assert not model.cluster_behind and model.unseen_followers == 1
    bound = head + model.link_gap + model.outlive_factor * 15.5 * MS
    assert model.follower_due == pytest.approx(bound)


def test_sustained_traffic_after_a_pause_is_not_learned_as_a_burst() -> None:
    # Independent users starting after a quiet spell are dense against the quiet rate before
    # them; traffic that goes on at that rate is no burst, so its size predicts nothing.
    model = ArrivalModel(busy_link_gap=0.050)
    t = stream(model, 0.0, 20 * MS, 64, in_flight=False)  # one user at a time
    t = burst(model, t + 0.5, [2.5 * MS] * 98)  # 99 arrivals over 245 ms after 500 ms of quiet
    assert model.cluster_isolated and model.cluster_is_burst
    model.observe(t + 6 * MS)  # more of the same, after a gap only a little longer than usual
    assert model.expected_size == 1 and not model.recent_bursts
    # A burst is followed by silence: then its size is learned.
    t = burst(model, t + 1.0, [0.1 * MS] * 7)
    model.observe(t + 6 * MS, in_flight=False)
    assert model.expected_size == 8
