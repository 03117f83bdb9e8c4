"""Regressions found with the simulator: a lone request after a finished one
is never held as if it were part of a burst."""

from sift_bench.simulate.engine_sim import simulate
from sift_bench.simulate.forward_model import CPU_LIKE
from sift_bench.simulate.traces import replay, sequential
from sift_server.engine.policy import AdaptivePolicy


def test_tight_loop_sequential_client_is_never_held() -> None:
    # CPU-like F(1) = 1.5 ms + 0.15 ms ingress + 0.2 ms think: arrivals 1.85 ms apart.
    result = simulate(AdaptivePolicy(), CPU_LIKE, sequential(7, think_time=0.0002))
    assert [round(r.queue_delay * 1e3, 3) for r in result.requests] == [0.0] * 7


def test_a_served_request_is_not_an_expected_companion() -> None:
    # Request 0 runs alone and finishes at 1.65 ms; request 1 arrives at 1.8 ms to an idle worker.
    result = simulate(AdaptivePolicy(), CPU_LIKE, replay([0.0, 0.0018]))
    assert result.requests[1].queue_delay == 0.0
