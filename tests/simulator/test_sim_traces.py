import itertools

import pytest

from sift_bench.simulate.traces import (
    DEFAULT_INGRESS,
    Arrival,
    IngressQueue,
    bursts,
    poisson,
    poisson_times,
    replay,
    sequential,
)


def test_ingress_is_one_server_queue() -> None:
    queue = IngressQueue(0.001)
    assert queue.admit(0.0) == pytest.approx(0.001)
    assert queue.admit(0.0) == pytest.approx(0.002)  # waits for the first
    assert queue.admit(0.0105) == pytest.approx(0.0115)  # idle server again
    with pytest.raises(ValueError):
        queue.admit(0.005)


def test_arrival_validates() -> None:
    with pytest.raises(ValueError):
        Arrival("x", arrival=1.0, admission=0.5)


def test_sequential_is_closed_loop() -> None:
    client = sequential(3, think_time=0.002)
    (first,) = client.start()
    assert first.arrival == 0.0
    assert first.admission == pytest.approx(DEFAULT_INGRESS)
    (second,) = client.on_complete(first.request_id, 0.010)
    assert second.arrival == pytest.approx(0.012)
    (third,) = client.on_complete(second.request_id, 0.020)
    assert client.on_complete(third.request_id, 0.030) == []


def test_bursts_release_after_completion_and_idle_gap() -> None:
    client = bursts(size=4, count=2, jitter_max=0.003, idle_gap=0.05, seed=7, warmup=1)
    first = client.start()
    assert len(first) == 4
    assert all(0.0 <= a.arrival <= 0.003 for a in first)
    assert [a.arrival for a in first] == sorted(a.arrival for a in first)
    assert all(a.group == 0 and not a.scored for a in first)
    # Admissions are serialized by the ingress queue.
    assert all(b.admission >= a.admission + DEFAULT_INGRESS - 1e-12 for a, b in itertools.pairwise(first))
    for a in first[:-1]:
        assert client.on_complete(a.request_id, 0.02) == []
    second = client.on_complete(first[-1].request_id, 0.03)
    assert len(second) == 4
    assert all(0.08 <= a.arrival <= 0.083 and a.group == 1 and a.scored for a in second)
    assert all(client.on_complete(a.request_id, 0.1) == [] for a in second)


def test_burst_seeds_reproduce() -> None:
    def offsets(seed: int) -> list[float]:
        return [a.arrival for a in bursts(8, 1, 0.003, 0.05, seed).start()]

    assert offsets(1) == offsets(1)
    assert offsets(1) != offsets(2)
    assert all(a.arrival == 0.0 for a in bursts(8, 1, 0.0, 0.05, 1).start())


def test_poisson_seeds_reproduce_and_rate_is_right() -> None:
    assert poisson_times(1000, 1.0, 3) == poisson_times(1000, 1.0, 3)
    assert poisson_times(1000, 1.0, 3) != poisson_times(1000, 1.0, 4)
    times = poisson_times(1000, 5.0, 3)
    assert 4700 < len(times) < 5300
    assert times == sorted(times) and times[-1] < 5.0
    client = poisson(1000, 1.0, 3, warmup=0.1)
    arrivals = client.start()
    assert [a.arrival for a in arrivals] == poisson_times(1000, 1.0, 3)
    assert all(a.scored == (a.arrival >= 0.1) for a in arrivals)
    assert client.on_complete(arrivals[0].request_id, 1.0) == []


def test_replay_admissions() -> None:
    arrivals = replay([0.0, 0.0, 0.001], ingress=0.0005).start()
    assert [a.admission for a in arrivals] == pytest.approx([0.0005, 0.001, 0.0015])


def test_poisson_load_is_relative_to_the_slower_of_forward_and_ingress() -> None:
    from sift_bench.simulate.forward_model import GPU_LIKE, LinearForward
    from sift_bench.simulate.scenarios import system_capacity
    from sift_server.engine.batch_queue import Caps

    assert system_capacity(GPU_LIKE, Caps(), 0.00015) == GPU_LIKE.capacity(64)
    fast = LinearForward(a=0.0012, b=0.00003)
    assert system_capacity(fast, Caps(), 0.00015) == 1 / 0.00015
    assert system_capacity(fast, Caps(), 0.0) == fast.capacity(64)
