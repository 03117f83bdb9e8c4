"""Serve first, decide in the background (issue 23.5): an ``auto`` entry is
ready on torch fp32 before its backend decision ends, switches between forwards
when it does, and says so in its runtime description; with a fake chooser
gated by the test (no wall clock)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.engine.model_engine import ModelEngine
from sift_server.engine.policy import ImmediatePolicy
from sift_server.registry.catalog import Catalog, ModelSpec
from sift_server.registry.registry import Registry
from sift_server.registry.switching import SwitchingAdapter

MB = 2**20


class Backend(Adapter):
    """A loaded model whose answers name the backend it runs on."""

    def __init__(self, backend: str, started: threading.Event | None = None, gate: threading.Event | None = None):
        self.backend = backend
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}), runtime={"backend": backend, "precision": "fp32", "selected_by": "test"}
        )
        self.closed = False
        self.forwards = 0
        self._started, self._gate = started, gate

    @classmethod
    def load(cls, ctx: LoadContext) -> Backend:
        raise NotImplementedError

    def prepare(self, task: TaskInput) -> Prepared:
        return Prepared([1], None, None)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        assert not self.closed, "a forward ran on a released model"
        if self._started is not None and self._gate is not None:
            self._started.set()
            self._gate.wait(10)
        self.forwards += 1
        return [[self.backend] * (p.stop - p.start) for p in parts]

    def memory_bytes(self) -> int:
        return (10 if self.backend == "torch" else 5) * MB

    def close(self) -> None:
        self.closed = True


class Chooser:
    """The loader: torch at once; ``auto`` waits until the test opens the gate."""

    def __init__(self, fail: bool = False) -> None:
        self.gate = threading.Event()
        self.loaded: list[Backend] = []
        self.asked: list[str] = []
        self.fail = fail

    def __call__(self, spec: ModelSpec) -> Adapter:
        self.asked.append(spec.backend)
        if spec.backend == "auto":
            assert self.gate.wait(10)
            if self.fail:
                raise RuntimeError("export failed")
            adapter = Backend("onnx")
        else:
            adapter = Backend(spec.backend)
        self.loaded.append(adapter)
        return adapter


def registry(loader: Any, backend: str = "auto", backend_override: str | None = None) -> Registry:
    def factory(spec: ModelSpec, adapter: Adapter, curve: object) -> ModelEngine:
        return ModelEngine(spec.name, adapter.forward, ImmediatePolicy())

    spec = ModelSpec(name="m", adapter="sentence-embedder", source={"hf": "m"}, tasks=["encode"], backend=backend)
    return Registry(
        Catalog([spec]), factory, memory_budget_bytes=100 * MB, loader=loader, backend_override=backend_override
    )


def answer(adapter: Adapter) -> str:
    [[value]] = adapter.forward([Part(Prepared([1], None, None), 0, 1)])
    return str(value)


async def test_ready_on_torch_before_the_decision_then_switches(caplog: pytest.LogCaptureFixture) -> None:
    chooser = Chooser()
    reg = registry(chooser)
    record = await reg.load_now("m")  # returns although the decision is gated
    adapter = record.adapter
    assert isinstance(adapter, SwitchingAdapter)
    assert chooser.asked[0] == "torch"
    assert answer(adapter) == "torch"
    assert adapter.info.runtime["backend"] == "torch"
    assert "pending" in adapter.info.runtime
    assert record.decide_task is not None and not record.decide_task.done()

    with caplog.at_level(logging.INFO, logger="sift_server.registry.registry"):
        chooser.gate.set()
        await record.decide_task
    torch_copy, decided = chooser.loaded
    assert answer(adapter) == "onnx"
    assert adapter.info.runtime["backend"] == "onnx" and "pending" not in adapter.info.runtime
    assert torch_copy.closed and not decided.closed
    assert record.memory_bytes == 5 * MB
    assert any("switched from torch fp32 to onnx fp32" in r.getMessage() for r in caplog.records)
    await reg.close(0.0)


async def test_a_failed_decision_keeps_serving_on_torch() -> None:
    chooser = Chooser(fail=True)
    reg = registry(chooser)
    record = await reg.load_now("m")
    assert record.adapter is not None and record.decide_task is not None
    chooser.gate.set()
    await record.decide_task
    assert answer(record.adapter) == "torch"
    runtime = record.adapter.info.runtime
    assert "pending" not in runtime and "export failed" in runtime["decision"]
    await reg.close(0.0)


async def test_a_model_evicted_while_deciding_drops_the_decision() -> None:
    chooser = Chooser()
    reg = registry(chooser)
    record = await reg.load_now("m")
    task = record.decide_task
    assert task is not None
    await reg.evict("m")
    chooser.gate.set()
    await task
    torch_copy, decided = chooser.loaded
    assert torch_copy.closed and decided.closed and record.adapter is None


@pytest.mark.parametrize("backend", ["torch", "onnx"])
async def test_an_explicit_backend_loads_once(backend: str) -> None:
    chooser = Chooser()
    record = await registry(chooser, backend).load_now("m")
    assert chooser.asked == [backend] and record.decide_task is None
    assert not isinstance(record.adapter, SwitchingAdapter)


async def test_sift_backend_override_loads_once() -> None:
    chooser = Chooser()
    chooser.gate.set()
    record = await registry(chooser, backend_override="openvino").load_now("m")
    assert chooser.asked == ["auto"] and record.decide_task is None


def test_switch_waits_for_the_running_forward() -> None:
    started, gate = threading.Event(), threading.Event()
    old, new = Backend("torch", started, gate), Backend("onnx")
    serving = SwitchingAdapter(old, "deciding")
    running = threading.Thread(target=answer, args=(serving,))
    running.start()
    assert started.wait(10)
    switched = threading.Event()
    switcher = threading.Thread(target=lambda: (serving.switch(new), switched.set()))
    switcher.start()
    assert not switched.wait(0.05)  # held by the forward on the old model
    gate.set()
    running.join(10)
    switcher.join(10)
    assert switched.is_set() and old.forwards == 1
    assert answer(serving) == "onnx" and serving.switches == 1
