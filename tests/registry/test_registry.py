"""Loading on demand, load failures, eviction and fair residency (the registry as the
shell of registry/residency.py), with a fake loader."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.engine.model_engine import ModelEngine
from sift_server.engine.policy import ImmediatePolicy
from sift_server.errors import ModelLoadFailed, ModelLoading, ModelNotFound, ResourceExhausted
from sift_server.registry.catalog import Catalog, ModelSpec
from sift_server.registry.registry import Registry
from sift_server.registry.residency import ResidencyConfig

MB = 2**20


class FakeAdapter(Adapter):
    info = AdapterInfo(tasks=frozenset({"encode"}), outputs=("dense",), dims={"dense": 2})

    def __init__(self, size: int) -> None:
        self.size = size
        self.closed = False

    @classmethod
    def load(cls, ctx: LoadContext) -> FakeAdapter:
        raise NotImplementedError

    def prepare(self, task: TaskInput) -> Prepared:
        return Prepared([1], None, None)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        return [[0] * (p.stop - p.start) for p in parts]

    def memory_bytes(self) -> int:
        return self.size

    def close(self) -> None:
        self.closed = True


# As the suite pins servers (tests/conftest.py): every entry on torch fp32, no decision in the background.
PINNED = "torch:fp32"


def catalog(*names: str) -> Catalog:
    return Catalog(ModelSpec(name=n, adapter="sentence-embedder", source={"hf": n}, tasks=["encode"]) for n in names)


def registry(
    loader: Any,
    budget_mb: int = 100,
    names: tuple[str, ...] = ("a", "b", "c"),
    recent_use_s: float = 0.0,
    clock: Any = None,
    **residency: Any,
) -> Registry:
    """By default without the recent-use protection (``linger_s``), so plain LRU order is tested."""

    def factory(spec: ModelSpec, adapter: Adapter, curve: object) -> ModelEngine:
        return ModelEngine(spec.name, adapter.forward, ImmediatePolicy())

    extra = {"clock": clock} if clock is not None else {}
    return Registry(
        catalog(*names),
        factory,
        memory_budget_bytes=budget_mb * MB,
        loader=loader,
        residency=ResidencyConfig(linger_s=recent_use_s, **residency),
        backend_override=PINNED,
        **extra,
    )


async def test_cold_model_answers_loading_then_serves() -> None:
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    def loader(spec: ModelSpec) -> Adapter:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        return FakeAdapter(10 * MB)

    reg = registry(loader)
    with pytest.raises(ModelLoading) as info:
        reg.ready_engine("a")
    assert info.value.retry_after == 2  # the load time assumed before a first load
    assert reg.record("a").state == "loading"
    with pytest.raises(ModelLoading):
        reg.ready_engine("a")  # still loading: no second load started
    gate.set()
    await reg.record("a").load_task  # type: ignore[misc]
    record, _ = reg.ready_engine("a")
    assert record.state == "loaded" and record.memory_bytes == 10 * MB
    await reg.close(0)


async def test_a_peak_reported_while_loading_is_counted_until_the_load_ends() -> None:
    from sift_server.adapters.load_peak import report_load_peak

    loop = asyncio.get_running_loop()
    reported, gate = threading.Event(), asyncio.Event()
    fail = False

    def loader(spec: ModelSpec) -> Adapter:
        report_load_peak(80 * MB)  # a conversion in a child process, say
        reported.set()
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        if fail:
            raise RuntimeError("the conversion died")
        return FakeAdapter(10 * MB)

    reg = registry(loader)
    with pytest.raises(ModelLoading):
        reg.ready_engine("a")
    await asyncio.to_thread(reported.wait)
    await asyncio.sleep(0)  # the report hops to the event loop
    assert reg.residency.models["a"].bytes == 80 * MB and reg.residency.held_bytes() == 80 * MB
    gate.set()
    await reg.record("a").load_task  # type: ignore[misc]
    assert reg.residency.models["a"].bytes == 10 * MB  # the loaded model's own size
    # A failed load gives the peak back too.
    fail, gate = True, asyncio.Event()
    reported.clear()
    with pytest.raises(ModelLoading):
        reg.ready_engine("b")
    await asyncio.to_thread(reported.wait)
    await asyncio.sleep(0)
    assert reg.residency.models["b"].bytes == 80 * MB
    gate.set()
    await reg.record("b").load_task  # type: ignore[misc]
    assert reg.residency.models["b"].bytes == 0 and reg.residency.held_bytes() == 10 * MB
    await reg.close(0)


async def test_a_reported_peak_evicts_idle_models_before_the_peak_arrives() -> None:
    # The conversion starts its child when report_load_peak returns: the idle model that the
    # peak does not fit beside must be released by then, not while the peak is already held.
    from sift_server.adapters.load_peak import report_load_peak

    adapters: dict[str, FakeAdapter] = {}
    when_the_peak_began: dict[str, bool] = {}

    def loader(spec: ModelSpec) -> Adapter:
        if spec.name == "a":
            report_load_peak(80 * MB)
            when_the_peak_began["b closed"] = adapters["b"].closed
        adapters[spec.name] = FakeAdapter(40 * MB)
        return adapters[spec.name]

    reg = registry(loader, budget_mb=100)
    await reg.load_now("b")
    await reg.load_now("a")  # 80 MB of peak + b's 40 MB > 100 MB: b goes first
    assert when_the_peak_began == {"b closed": True}
    assert reg.record("b").state == "available" and reg.record("a").state == "loaded"
    await reg.close(0)


async def test_unknown_model_suggests_a_close_name() -> None:
    reg = registry(lambda spec: FakeAdapter(1))
    with pytest.raises(ModelNotFound, match="Did you mean 'a'"):
        reg.record("A")


async def test_permanent_load_failure_is_a_502_without_retry() -> None:
    def loader(spec: ModelSpec) -> Adapter:
        raise FileNotFoundError("no weights here")

    reg = registry(loader)
    with pytest.raises(ModelLoading):
        reg.ready_engine("a")
    await reg.record("a").load_task  # type: ignore[misc]
    with pytest.raises(ModelLoadFailed) as info:
        reg.ready_engine("a")
    assert info.value.status == 502 and info.value.retry_after is None
    assert info.value.extra["error_class"] == "NOT_FOUND" and info.value.extra["permanent"] is True
    assert reg.record("a").last_error is not None


async def test_transient_failures_become_permanent_after_three_attempts() -> None:
    attempts = 0

    def loader(spec: ModelSpec) -> Adapter:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("flaky storage")

    reg = registry(loader)
    for _ in range(3):
        with pytest.raises(ModelLoading):
            reg.ready_engine("a")
        await reg.record("a").load_task  # type: ignore[misc]
    with pytest.raises(ModelLoadFailed):
        reg.ready_engine("a")
    assert attempts == 3


async def test_least_recently_used_model_is_evicted_under_the_budget() -> None:
    adapters: dict[str, FakeAdapter] = {}

    def loader(spec: ModelSpec) -> Adapter:
        adapters[spec.name] = FakeAdapter(40 * MB)
        return adapters[spec.name]

    reg = registry(loader, budget_mb=100)
    await reg.load_now("a")
    await reg.load_now("b")
    reg.ready_engine("a")  # a is now more recently used than b
    await reg.load_now("c")  # 120 MB > 100 MB: b goes
    assert reg.record("b").state == "available" and adapters["b"].closed
    assert reg.record("a").state == "loaded" and reg.record("c").state == "loaded"
    assert reg.evictions == 1 and reg.loaded_bytes() == 80 * MB
    await reg.close(0)


async def test_requests_queued_on_an_evicted_model_are_told_to_retry() -> None:
    adapter = GatedAdapter(10 * MB)
    reg = registry(lambda spec: adapter)
    await reg.load_now("a")
    _, worker = reg.ready_engine("a")
    worker.submit(Prepared([1], None, None), request_id="running")
    await asyncio.to_thread(adapter.entered.wait, 30)
    ticket = worker.submit(Prepared([1], None, None), request_id="r")  # queued behind it
    eviction = asyncio.create_task(reg.evict("a"))
    with pytest.raises(ModelLoading):
        await ticket.future
    adapter.gate.set()
    await eviction
    with pytest.raises(ModelLoading):
        reg.ready_engine("a")  # reloads on demand
    await reg.close(0)


class GatedAdapter(FakeAdapter):
    """Its forward waits for a gate, and fails if the weights were released under it."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.closed_during_forward = False

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        self.entered.set()
        self.gate.wait(timeout=30)
        self.closed_during_forward = self.closed
        return super().forward(parts)


async def test_eviction_releases_the_model_only_after_its_running_forward() -> None:
    adapter = GatedAdapter(10 * MB)
    reg = registry(lambda spec: adapter)
    await reg.load_now("a")
    _, worker = reg.ready_engine("a")
    ticket = worker.submit(Prepared([1], None, None), request_id="r")
    await asyncio.to_thread(adapter.entered.wait, 30)
    eviction = asyncio.create_task(reg.evict("a"))
    with pytest.raises(ModelLoading):
        await ticket.future
    assert not adapter.closed  # the forward still runs in its thread
    adapter.gate.set()
    await eviction
    assert adapter.closed and not adapter.closed_during_forward
    await reg.close(0)


async def test_a_request_answered_just_before_its_model_is_evicted_still_gets_its_response() -> None:
    # Eviction resets the record synchronously; the request's coroutine resumes
    # after that and must not read the (now empty) record.
    from sift_server.service.common import Limits
    from sift_server.service.encode import encode
    from sift_server.service.prep import PrepThread
    from sift_server.service.run import RequestContext
    from sift_server.wire.schemas import EncodeBody, Item

    reg_holder: list[Registry] = []

    def evict_sync_part(record: object) -> None:
        model = reg_holder[0].record("a")
        model.state, model.worker, model.adapter = "available", None, None

    def factory(spec: ModelSpec, adapter: Adapter, curve: object) -> ModelEngine:
        return ModelEngine(spec.name, adapter.forward, ImmediatePolicy(), observers=[evict_sync_part])

    class VectorAdapter(FakeAdapter):
        def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
            return [[np.zeros(2, dtype=np.float32)] * (p.stop - p.start) for p in parts]

    reg = Registry(
        catalog("a"),
        factory,
        memory_budget_bytes=100 * MB,
        loader=lambda spec: VectorAdapter(MB),
        backend_override=PINNED,
    )
    reg_holder.append(reg)
    await reg.load_now("a")
    prep = PrepThread()
    body, ctx = EncodeBody(items=[Item(text="hello")]), RequestContext("r", 0.0, prep=prep)
    outcome = await encode(reg, "a", body, Limits(1024, 8), ctx)
    prep.close()
    assert outcome.payload["items"][0]["dense"]["dims"] == 2


class CyclicAdapter(FakeAdapter):
    """Holds a reference cycle, as real models do (modules, hooks, configs):
    only the cycle collector can free it."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.cycle = [self]


async def test_an_evicted_model_is_freed_even_though_loads_freeze_the_heap() -> None:
    import gc
    import weakref

    refs: dict[str, weakref.ref[Adapter]] = {}

    def loader(spec: ModelSpec) -> Adapter:
        adapter = CyclicAdapter(10 * MB)
        refs[spec.name] = weakref.ref(adapter)
        return adapter

    reg = registry(loader)
    try:
        await reg.load_now("a")
        await reg.load_now("b")  # a second load freezes a's objects again
        await reg.evict("a")
        assert refs["a"]() is None, "the evicted adapter is still alive"
        assert refs["b"]() is not None
    finally:
        await reg.close(0)
        gc.unfreeze()


async def test_a_busy_model_keeps_its_memory_for_its_turn_then_finishes_its_work_before_it_gives_way() -> None:
    now = [1000.0]
    gated = GatedAdapter(60 * MB)
    reg = registry(
        lambda spec: gated if spec.name == "a" else FakeAdapter(60 * MB), budget_mb=100, clock=lambda: now[0]
    )
    await reg.load_now("b")  # b's size is known from now on
    await reg.load_now("a")  # b had no clients: it gave way at once
    assert reg.record("b").state == "available"
    _, engine = reg.ready_engine("a")
    running = engine.submit(Prepared([1], None, None), request_id="running")
    await asyncio.to_thread(gated.entered.wait, 30)  # a forward in flight
    queued = engine.submit(Prepared([1], None, None), request_id="queued")
    # a's turn is min_turn_s (2 s; its load took no clock time): b waits for memory.
    with pytest.raises(ResourceExhausted, match=r"waiting for memory.*'a'") as info:
        reg.ready_engine("b")
    assert info.value.status == 503 and info.value.retry_after == 3  # turn end 2 s + drain 0.5 s + b's load 0 s
    assert reg.record("b").state == "available" and reg.record("a").state == "loaded"
    now[0] += 1.0
    reg.replan()
    assert reg.record("a").state == "loaded"  # still its turn
    now[0] += 1.0
    reg.replan()  # the turn is over: a drains (admits nothing new) and then gives way
    assert reg.record("a").state == "unloading"
    with pytest.raises(ModelLoading, match="'a' is finishing"):
        reg.ready_engine("b")  # the swap for b is under way
    with pytest.raises(ResourceExhausted, match="waiting for memory"):
        reg.ready_engine("a")  # a's clients wait for b's turn
    assert not gated.closed
    gated.gate.set()
    assert len(await running.future) == 1 and len(await queued.future) == 1  # in-flight and queued work finished
    await reg.record("a").unload_task  # type: ignore[misc]
    assert gated.closed and not gated.closed_during_forward
    await reg.record("b").load_task  # type: ignore[misc]
    assert reg.record("b").state == "loaded" and reg.evictions == 2
    await reg.close(0)


async def test_a_model_without_clients_gives_way_at_once() -> None:
    reg = registry(lambda spec: FakeAdapter(60 * MB), budget_mb=100)
    await reg.load_now("b")
    await reg.load_now("a")
    with pytest.raises(ModelLoading, match="is loading"):
        reg.ready_engine("b")  # a is idle and was not used within linger_s (0 here)
    assert reg.record("a").state == "unloading"
    await reg.record("a").unload_task  # type: ignore[misc]
    await reg.record("b").load_task  # type: ignore[misc]  # started when a's memory came back
    assert reg.record("b").state == "loaded" and reg.record("a").state == "available"
    await reg.close(0)


async def test_a_huge_unknown_model_name_is_answered_without_fuzzy_matching_it() -> None:
    import difflib

    reg = registry(lambda spec: FakeAdapter(1))
    calls: list[str] = []
    original = difflib.get_close_matches

    def spy(word: str, *args: Any, **kwargs: Any) -> list[str]:
        calls.append(word)
        return original(word, *args, **kwargs)

    difflib.get_close_matches = spy  # type: ignore[assignment]
    try:
        with pytest.raises(ModelNotFound) as info:
            reg.record("m" * 8_000_000)
    finally:
        difflib.get_close_matches = original
    assert calls == []  # comparing megabytes with difflib stalls the event loop for seconds
    assert len(info.value.message) < 1000  # and the name is not echoed whole


async def test_a_model_just_loaded_keeps_its_memory_until_its_clients_told_to_come_back_have_returned() -> None:
    # Clients of a cold model sleep Retry-After between tries, so a model just
    # loaded looks idle; the clients it was promised keep it resident for them.
    now = [1000.0]
    reg = registry(lambda spec: FakeAdapter(60 * MB), budget_mb=100, clock=lambda: now[0], return_slack_s=1.0)
    await reg.load_now("b")
    await reg.load_now("a")  # b evicted, both sizes known
    with pytest.raises(ModelLoading) as info:
        reg.ready_engine("b")  # a has no clients: it gives way, b loads
    promised = info.value.retry_after
    assert promised is not None and promised >= 1
    await reg.record("a").unload_task  # type: ignore[misc]
    await reg.record("b").load_task  # type: ignore[misc]
    with pytest.raises(ResourceExhausted, match=r"waiting for memory.*'b'"):
        reg.ready_engine("a")  # b's clients are still sleeping their Retry-After
    assert reg.record("b").state == "loaded"
    now[0] += promised + 0.5
    reg.replan()
    assert reg.record("b").state == "loaded"  # within their slack
    now[0] += 1.0  # promise + slack (1 s) and b's turn (2 s) are over; nobody used b
    reg.replan()
    assert reg.record("b").state in ("unloading", "available")
    await reg.record("b").unload_task  # type: ignore[misc]
    await reg.record("a").load_task  # type: ignore[misc]
    assert reg.record("a").state == "loaded"  # the waiter loads without another request
    await reg.close(0)


async def test_a_load_in_progress_holds_its_share_of_the_budget() -> None:
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()
    sizes = {"a": 60 * MB, "b": 60 * MB}

    def loader(spec: ModelSpec) -> Adapter:
        if spec.name == "b" and gate.is_set() is False and reg.record("b").known_bytes:
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        return FakeAdapter(sizes[spec.name])

    reg = registry(loader, budget_mb=100)
    await reg.load_now("b")
    await reg.load_now("a")  # b evicted; both sizes known now
    await reg.evict("a")
    with pytest.raises(ModelLoading, match="is loading"):
        reg.ready_engine("b")  # b loads (held at the gate)
    await asyncio.sleep(0.05)
    with pytest.raises(ResourceExhausted, match="memory"):
        reg.ready_engine("a")  # does not start a second load that cannot fit
    assert reg.record("a").state == "available"
    gate.set()
    await reg.record("b").load_task  # type: ignore[misc]
    await reg.close(0)


async def test_preloading_models_that_do_not_fit_together_fails_clearly() -> None:
    reg = registry(lambda spec: FakeAdapter(60 * MB), budget_mb=100, recent_use_s=10.0)
    await reg.load_now("b")
    await reg.evict("b")  # b's size is known from now on
    await reg.load_now("a")
    with pytest.raises(ModelLoadFailed, match="memory budget"):
        await reg.load_now("b")  # a was just loaded: protected
    assert reg.record("a").state == "loaded"
    await reg.close(0)
