"""The worker shell under real asyncio concurrency, with a fake forward that
records every batch. Waits on events, never on wall-clock bounds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from sift_server.adapters.base import Part, Prepared
from sift_server.engine.batch_queue import Caps
from sift_server.engine.clock import FakeClock
from sift_server.engine.model_engine import EngineConfig, ModelEngine
from sift_server.engine.policy import AdaptivePolicy, Decision, ImmediatePolicy, TimedPolicy, WaitUntil
from sift_server.engine.scheduler import Scheduler, SchedulerConfig
from sift_server.errors import InferenceError, QueueFull, QueueTimeout, ShuttingDown


class FakeForward:
    """Echoes each item's payload; can be gated to hold a forward open."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_when: str | None = None

    def __call__(self, parts: Sequence[Part]) -> list[list[Any]]:
        ids = [f"{p.prepared.payload[i]}" for p in parts for i in range(p.start, p.stop)]
        self.batches.append(ids)
        self.entered.set()
        self.gate.wait(timeout=30)
        if self.fail_when is not None and self.fail_when in ids:
            raise RuntimeError("boom")
        return [[f"out:{p.prepared.payload[i]}" for i in range(p.start, p.stop)] for p in parts]


def prepared(*names: str, key: object = None) -> Prepared:
    return Prepared(item_costs=[4] * len(names), compat_key=key, payload=list(names))


class DecisionLog:
    """The decisions the worker's scheduler returns, in order, to be awaited one by one."""

    def __init__(self) -> None:
        self._arrived = asyncio.Queue[Decision]()

    def add(self, decision: Decision) -> None:
        self._arrived.put_nowait(decision)

    async def next(self) -> Decision:
        return await asyncio.wait_for(self._arrived.get(), 30)


def record_decisions(worker: ModelEngine, monkeypatch: pytest.MonkeyPatch) -> DecisionLog:
    """Log every decision of ``worker`` from now on (a test waits on one instead of counting loop turns)."""
    log = DecisionLog()
    decide = worker.scheduler.decide

    def recording(now: float) -> Decision:
        decision = decide(now)
        log.add(decision)
        return decision

    monkeypatch.setattr(worker.scheduler, "decide", recording)
    return log


def make_worker(forward: FakeForward, policy: Any = None, **config: Any) -> ModelEngine:
    worker = ModelEngine("m", forward, policy or ImmediatePolicy(), EngineConfig(scheduler=SchedulerConfig(**config)))
    worker.start()
    return worker


async def test_each_request_gets_its_own_outputs_in_order() -> None:
    forward = FakeForward()
    worker = make_worker(forward)
    ticket = worker.submit(prepared("a", "b", "c"), request_id="r")
    assert await ticket.future == ["out:a", "out:b", "out:c"]
    assert ticket.timing.forwards == 1
    await worker.close(1.0)


async def test_a_burst_arriving_in_one_loop_turn_runs_as_one_forward() -> None:
    forward = FakeForward()
    worker = make_worker(forward, AdaptivePolicy())
    tickets = [worker.submit(prepared(f"x{i}"), request_id=f"r{i}") for i in range(32)]
    results = await asyncio.gather(*(t.future for t in tickets))
    assert results == [[f"out:x{i}"] for i in range(32)]
    assert len(forward.batches) == 1
    assert worker.forwards_run == 1
    await worker.close(1.0)


async def test_requests_in_ingress_hold_the_forward_until_admitted(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = FakeForward()
    worker = make_worker(forward, AdaptivePolicy(max_hold=30.0))
    tickets_in_ingress = [worker.ingress.begin(0.0) for _ in range(3)]
    decisions = record_decisions(worker, monkeypatch)
    first = worker.submit(prepared("a"), request_id="a", ingress=tickets_in_ingress[0])
    assert isinstance(await decisions.next(), WaitUntil)  # two still in ingress: hold
    assert forward.batches == []
    second = worker.submit(prepared("b"), request_id="b", ingress=tickets_in_ingress[1])
    tickets_in_ingress[2].end()  # this one failed validation and never arrives
    await asyncio.gather(first.future, second.future)
    assert forward.batches == [["a", "b"]]
    await worker.close(1.0)


async def test_work_arriving_during_a_forward_drains_in_the_next_one() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, TimedPolicy())
    first = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    later = [worker.submit(prepared(f"b{i}"), request_id=f"b{i}") for i in range(5)]
    forward.gate.set()
    await asyncio.gather(first.future, *(t.future for t in later))
    assert forward.batches == [["a"], ["b0", "b1", "b2", "b3", "b4"]]
    await worker.close(1.0)


async def test_cancelled_queued_request_never_runs() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    gone = worker.submit(prepared("gone"), request_id="gone")
    kept = worker.submit(prepared("kept"), request_id="kept")
    gone.future.cancel()
    forward.gate.set()
    assert await kept.future == ["out:kept"]
    await running.future
    assert all("gone" not in batch for batch in forward.batches)
    await worker.close(1.0)


async def test_cancel_during_forward_drops_only_that_result() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    tickets = [worker.submit(prepared(f"x{i}"), request_id=f"r{i}") for i in range(3)]
    await asyncio.to_thread(forward.entered.wait, 30)
    tickets[1].future.cancel()
    forward.gate.set()
    assert await tickets[0].future == ["out:x0"]
    assert await tickets[2].future == ["out:x2"]
    assert tickets[1].future.cancelled()
    await worker.close(1.0)


async def test_forward_error_fails_only_its_own_requests_and_worker_keeps_serving() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, caps=Caps(max_requests=2))
    first = worker.submit(prepared("ok0"), request_id="ok0")
    await asyncio.to_thread(forward.entered.wait, 30)
    bad = worker.submit(prepared("bad"), request_id="bad")
    peer = worker.submit(prepared("peer"), request_id="peer")
    after = worker.submit(prepared("after"), request_id="after")
    forward.fail_when = "bad"
    forward.gate.set()
    assert await first.future == ["out:ok0"]
    with pytest.raises(InferenceError):
        await bad.future
    with pytest.raises(InferenceError):
        await peer.future  # shared the failing forward
    assert await after.future == ["out:after"]
    assert [b for b in forward.batches if "after" in b] == [["after"]]
    await worker.close(1.0)


async def test_queue_full_rejects_beyond_max_queue_items() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, max_queue_items=4)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    queued = worker.submit(prepared("b", "c", "d", "e"), request_id="b")
    with pytest.raises(QueueFull) as info:
        worker.submit(prepared("f"), request_id="f")
    assert info.value.retry_after == 1
    forward.gate.set()
    await asyncio.gather(running.future, queued.future)
    await worker.close(1.0)


async def test_a_request_larger_than_the_room_left_waits_its_turn() -> None:
    # The queue bound is not the per-request cap: a large request behind a busy
    # queue enters while there is room, instead of QUEUE_FULL until it empties.
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, max_queue_items=8)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    small = worker.submit(prepared("b", "c", "d"), request_id="b")
    large = worker.submit(prepared(*(f"x{i}" for i in range(12))), request_id="large")
    forward.gate.set()
    await asyncio.gather(running.future, small.future)
    assert len(await large.future) == 12
    await worker.close(1.0)


async def test_a_request_queued_past_the_deadline_is_refused_and_the_rest_runs() -> None:
    clock = FakeClock()
    forward = FakeForward()
    forward.gate.clear()
    worker = ModelEngine(
        "m", forward, ImmediatePolicy(), EngineConfig(scheduler=SchedulerConfig(queue_timeout=5.0)), clock=clock
    )
    worker.start()
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    stale = worker.submit(prepared("stale"), request_id="stale")
    clock.advance(4.0)
    fresh = worker.submit(prepared("fresh"), request_id="fresh")
    clock.advance(2.0)
    forward.gate.set()
    assert await running.future == ["out:a"]
    with pytest.raises(QueueTimeout) as info:
        await stale.future
    assert info.value.status == 503 and info.value.retry_after == 1
    assert await fresh.future == ["out:fresh"]
    assert all("stale" not in batch for batch in forward.batches)
    await worker.close(1.0)


async def test_shutdown_finishes_queued_work_within_grace_then_refuses() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    queued = worker.submit(prepared("b"), request_id="b")
    closing = asyncio.create_task(worker.close(30.0))
    await asyncio.sleep(0)
    with pytest.raises(ShuttingDown):
        worker.submit(prepared("late"), request_id="late")
    forward.gate.set()
    await closing
    assert await running.future == ["out:a"]
    assert await queued.future == ["out:b"]


async def test_shutdown_past_grace_fails_what_remains_and_nothing_hangs() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    queued = worker.submit(prepared("b"), request_id="b")
    await worker.close(0.0)
    with pytest.raises(ShuttingDown):
        await queued.future
    with pytest.raises(ShuttingDown):
        await running.future
    forward.gate.set()


async def test_lanes_get_separate_queues_and_fair_turns() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, caps=Caps(max_requests=2))
    blocker = worker.submit(prepared("block"), request_id="block")
    await asyncio.to_thread(forward.entered.wait, 30)
    tickets = [worker.submit(prepared(f"base{i}"), request_id=f"b{i}") for i in range(4)]
    tickets.append(worker.submit(prepared("lora0"), request_id="l0", lane="lora-a"))
    forward.gate.set()
    await asyncio.gather(blocker.future, *(t.future for t in tickets))
    batches = forward.batches[1:]
    # No batch mixes lanes, and the LoRA request is not starved behind all base work.
    assert ["lora0"] in batches
    assert all(("lora0" in b) == (b == ["lora0"]) for b in batches)
    assert batches.index(["lora0"]) <= 2
    await worker.close(1.0)


async def test_split_request_reassembles_outputs_across_forwards() -> None:
    forward = FakeForward()
    worker = make_worker(forward, caps=Caps(max_cost=8))
    ticket = worker.submit(prepared("a", "b", "c", "d", "e"), request_id="big")
    assert await ticket.future == ["out:a", "out:b", "out:c", "out:d", "out:e"]
    assert forward.batches == [["a", "b"], ["c", "d"], ["e"]]
    assert ticket.timing.forwards == 3
    await worker.close(1.0)


async def test_split_request_stops_after_its_first_slice_fails() -> None:
    forward = FakeForward()
    forward.fail_when = "a"
    worker = make_worker(forward, caps=Caps(max_cost=8))
    ticket = worker.submit(prepared("a", "b", "c", "d", "e"), request_id="big")
    with pytest.raises(InferenceError):
        await ticket.future
    after = worker.submit(prepared("z"), request_id="z")
    assert await after.future == ["out:z"]
    assert forward.batches == [["a", "b"], ["z"]]
    await worker.close(1.0)


async def test_split_request_stops_when_its_client_leaves() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward, caps=Caps(max_cost=8))
    ticket = worker.submit(prepared("a", "b", "c", "d", "e"), request_id="big")
    await asyncio.to_thread(forward.entered.wait, 30)
    ticket.future.cancel()
    forward.gate.set()
    after = worker.submit(prepared("z"), request_id="z")
    assert await after.future == ["out:z"]
    assert forward.batches == [["a", "b"], ["z"]]
    await worker.close(1.0)


async def test_close_is_reentrant_and_every_caller_returns() -> None:
    # Signal, lifespan and eviction may all close a worker; a second call used
    # to replace the event the first one waited on, so the first waited out its grace.
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    first = asyncio.create_task(worker.close(3600.0))
    second = asyncio.create_task(worker.close(3600.0))
    await asyncio.sleep(0)
    forward.gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 30)
    assert await running.future == ["out:a"]


async def test_forward_finished_waits_for_a_forward_past_the_grace() -> None:
    forward = FakeForward()
    forward.gate.clear()
    worker = make_worker(forward)
    running = worker.submit(prepared("a"), request_id="a")
    await asyncio.to_thread(forward.entered.wait, 30)
    await worker.close(0.0)
    with pytest.raises(ShuttingDown):
        await running.future
    waiter = asyncio.create_task(worker.forward_finished())
    await asyncio.sleep(0)
    assert not waiter.done()  # the thread still runs the model
    forward.gate.set()
    await waiter


async def test_short_texts_are_answered_before_the_long_one_of_their_batch_ends() -> None:
    release_long = threading.Event()

    class LengthAware(FakeForward):
        def __call__(self, parts: Sequence[Part]) -> list[list[Any]]:
            if any(p.prepared.item_costs[p.start] > 100 for p in parts):
                release_long.wait(timeout=30)
            return super().__call__(parts)

    forward = LengthAware()
    worker = make_worker(forward, AdaptivePolicy())
    worker.scheduler.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])  # fixed part: 160 tokens' worth
    long = worker.submit(Prepared(item_costs=[500], compat_key=None, payload=["long"]), request_id="long")
    shorts = [worker.submit(Prepared([10], None, [f"s{i}"]), request_id=f"s{i}") for i in range(12)]
    assert [await t.future for t in shorts] == [[f"out:s{i}"] for i in range(12)]
    assert not long.future.done()  # its sub-forward still runs
    release_long.set()
    assert await long.future == ["out:long"]
    assert sorted(map(len, forward.batches)) == [1, 12]
    await worker.close(1.0)


async def test_under_returning_waves_a_batch_cut_by_length_is_answered_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An early answer would send its closed-loop client back while the long
    # sub-forward still runs, and split the next wave.
    release_long = threading.Event()
    long_started = threading.Event()

    class LengthAware(FakeForward):
        def __call__(self, parts: Sequence[Part]) -> list[list[Any]]:
            if any(p.prepared.item_costs[p.start] > 100 for p in parts):
                long_started.set()
                release_long.wait(timeout=30)
            return super().__call__(parts)

    # Its head came back from the last forward of a reliable wave (``Scheduler._whole_wave``).
    monkeypatch.setattr(Scheduler, "_whole_wave", lambda self, queue: True)
    forward = LengthAware()
    worker = make_worker(forward, AdaptivePolicy())
    worker.scheduler.seed_costs([(16, 0.010), (256, 0.020), (512, 0.030)])
    long = worker.submit(Prepared(item_costs=[500], compat_key=None, payload=["long"]), request_id="long")
    shorts = [worker.submit(Prepared([10], None, [f"s{i}"]), request_id=f"s{i}") for i in range(12)]
    assert await asyncio.to_thread(long_started.wait, 30)
    await asyncio.sleep(0)  # an early answer would have been scheduled by now
    assert not any(t.future.done() for t in shorts)
    release_long.set()
    assert [await t.future for t in shorts] == [[f"out:s{i}"] for i in range(12)]
    assert await long.future == ["out:long"]
    assert sorted(map(len, forward.batches)) == [1, 12]
    await worker.close(1.0)
