"""How many messages a worker takes from the stream for one model at once."""

from __future__ import annotations

from sift_server.cluster.worker import DEFAULT_MAX_INFLIGHT, holding_limit


def test_a_worker_holds_two_forwards_worth_by_default() -> None:
    # Four workers of a model that runs 4 requests per forward, each holding 64
    # messages: the stream handed messages to workers that could not run them
    # yet while others idled (3.49x for 4 workers instead of 4x); holding two
    # forwards' worth leaves the rest in the stream for whichever has room.
    assert holding_limit(None, batch_requests=4) == 8
    assert holding_limit(None, batch_requests=64) == DEFAULT_MAX_INFLIGHT
    assert holding_limit(None, batch_requests=None) == DEFAULT_MAX_INFLIGHT


def test_the_operator_limit_wins() -> None:
    assert holding_limit(3, batch_requests=64) == 3
    assert holding_limit(200, batch_requests=4) == 200
