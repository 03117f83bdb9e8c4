"""The event loop sharing the forward's core: reads and writes in one FIFO, the forward around them."""

from __future__ import annotations

import pytest

from sift_bench.simulate.engine_sim import EngineSim
from sift_bench.simulate.forward_model import LinearForward
from sift_bench.simulate.shared_loop import SharedLoop
from sift_bench.simulate.traces import replay
from sift_server.engine.policy import AdaptivePolicy
from sift_server.engine.scheduler import SchedulerConfig

MS = 0.001


def test_the_loop_reads_requests_one_after_the_other() -> None:
    loop = SharedLoop(read=0.5 * MS, write=0.1 * MS)
    assert loop.reserve(0.0, loop.read) == (0.0, 0.5 * MS)
    assert loop.reserve(0.1 * MS, loop.read) == (0.5 * MS, 1.0 * MS)  # it waits for the first
    assert loop.reserve(5 * MS, loop.read) == (5 * MS, 5.5 * MS)


def test_a_forward_finishes_later_by_the_loop_work_inside_it() -> None:
    loop = SharedLoop(read=1 * MS, write=0.0)
    loop.reserve(2 * MS, 1 * MS)  # [2, 3]
    loop.reserve(6 * MS, 1 * MS)  # [6, 7]
    assert loop.finish(0.0, 1 * MS) == pytest.approx(1 * MS)  # done before the loop works
    assert loop.finish(0.0, 4 * MS) == pytest.approx(5 * MS)  # one ms of reading inside it
    assert loop.finish(0.0, 10 * MS) == pytest.approx(12 * MS)
    assert loop.finish(2.5 * MS, 1 * MS) == pytest.approx(4 * MS)  # starts while the loop reads
    loop.forget(4 * MS)
    assert loop.busy == [(6 * MS, 7 * MS)]


def test_a_burst_reaches_the_scheduler_over_a_span_and_latency_counts_from_sending() -> None:
    forward = LinearForward(a=10 * MS, b=1 * MS)
    sim = EngineSim(
        AdaptivePolicy(),
        forward,
        replay([0.0] * 8, ingress=0.0),
        config=SchedulerConfig(shared_core=True),
        loop=SharedLoop(read=0.5 * MS, write=0.25 * MS),
    )
    result = sim.run()
    headers = sorted(r.arrival for r in result.requests)
    assert headers == pytest.approx([k * 0.5 * MS for k in range(8)])
    assert [f.size for f in result.forwards] == [8]  # the burst still runs as one forward
    start = result.forwards[0].start
    assert start == pytest.approx(4 * MS)  # once the last one is read
    answers = sorted(r.latency for r in result.requests)
    # Each answer leaves once the loop wrote it, counted from the client's send at 0.
    assert answers == pytest.approx([start + 18 * MS + (k + 1) * 0.25 * MS for k in range(8)])
