from __future__ import annotations

import pytest

from sift_bench.run.join import BurstPattern, burst_pattern, index_trace, join_requests
from sift_server.engine.trace import ForwardRecord


def fwd(forward_id: int, ids: list[str], start: float, *, items: int | None = None) -> ForwardRecord:
    n = len(ids)
    return ForwardRecord(
        model="m",
        lane="default",
        forward_id=forward_id,
        reason="lone" if n == 1 else "burst-complete",
        request_ids=ids,
        arrivals=[start - 0.003 + 0.0001 * i for i in range(n)],
        admitted=[start - 0.002 + 0.0001 * i for i in range(n)],
        items=items if items is not None else n,
        cost=10 * n,
        decided=start - 0.0001,
        start=start,
        end=start + 0.01,
    )


def test_every_request_joins_its_forward_with_times() -> None:
    records = [fwd(0, ["a"], 1.0), fwd(1, ["b", "c"], 2.0)]
    join = join_requests(["a", "b", "c"], records)
    assert join.missing == []
    assert set(join.joined) == {"a", "b", "c"}
    c = join.joined["c"]
    assert (c.forward_id, c.forward_requests, c.forwards, c.reason) == (1, 2, 1, "burst-complete")
    assert c.arrival == pytest.approx(1.9971)
    assert c.admitted == pytest.approx(1.9981)
    assert c.queue_s == pytest.approx(0.0019)
    assert c.wait_s == pytest.approx(0.0029)
    assert c.ingress_s == pytest.approx(0.001)
    assert c.end == pytest.approx(2.01)


def test_requests_missing_from_the_trace_are_listed() -> None:
    records = [fwd(0, ["a", "b"], 1.0)]
    join = join_requests(["a", "x", "b", "y"], records)
    assert join.missing == ["x", "y"]
    assert set(join.joined) == {"a", "b"}
    assert join.get("x") is None


def test_empty_trace_misses_everything() -> None:
    join = join_requests(["a", "b"], [])
    assert join.missing == ["a", "b"]
    assert join.joined == {}


def test_trace_requests_not_asked_for_are_ignored() -> None:
    join = join_requests(["b"], [fwd(0, ["warm-1", "b"], 1.0)])
    assert set(join.joined) == {"b"}
    assert join.joined["b"].forward_requests == 2


def test_split_request_counts_forwards_and_uses_the_first() -> None:
    # Records may come in any order in the file: the join sorts by forward start.
    records = [fwd(3, ["big"], 5.0, items=64), fwd(2, ["big"], 4.0, items=64)]
    hit = join_requests(["big"], records).joined["big"]
    assert hit.forward_id == 2
    assert hit.forwards == 2
    assert hit.start == 4.0
    assert hit.end == pytest.approx(5.01)
    assert [r.forward_id for r, _ in index_trace(records)["big"]] == [2, 3]


def test_burst_pattern_in_forward_order() -> None:
    burst = [f"r{i}" for i in range(8)]
    # The late seven ran in a forward written first to the file but started later.
    records = [fwd(1, burst[1:], 2.0), fwd(0, burst[:1], 1.0)]
    pattern = burst_pattern(burst, join_requests(burst, records))
    assert pattern == BurstPattern((1, 7), 0)
    assert pattern.label == "[1, 7]"
    assert not pattern.one_forward


def test_burst_in_one_forward_even_when_shared_with_others() -> None:
    burst = [f"r{i}" for i in range(8)]
    records = [fwd(0, ["other", *burst], 1.0)]
    pattern = burst_pattern(burst, join_requests(burst, records))
    assert pattern.sizes == (8,)
    assert pattern.one_forward
    assert pattern.label == "[8]"


def test_burst_with_missing_requests_is_not_one_forward() -> None:
    burst = [f"r{i}" for i in range(8)]
    records = [fwd(0, burst[:6], 1.0)]
    pattern = burst_pattern(burst, join_requests(burst, records))
    assert pattern.sizes == (6,)
    assert pattern.missing == 2
    assert not pattern.one_forward
    assert pattern.label == "[6] +2 missing"


def test_burst_pattern_of_a_burst_nobody_traced() -> None:
    pattern = burst_pattern(["a", "b"], join_requests(["a", "b"], []))
    assert pattern == BurstPattern((), 2)
    assert pattern.label == "[] +2 missing"
