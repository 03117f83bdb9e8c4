"""``auto``'s timing on a scripted clock: no model runs and no real time is measured.

Each fake runner advances a fake clock by its cost per forward; a "stall" (another
process holding the core for a stretch of wall time) multiplies the cost of every
forward that starts inside it. So each test says exactly what the timing loop sees,
and nothing here depends on how fast this machine is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters import _backends as backends

TORCH = backends.REFERENCE
ONNX = backends.Choice("onnx", "fp32")
OV_FP32 = backends.Choice("openvino", "fp32")
OV_BF16 = backends.Choice("openvino", "bf16")
TORCH_BF16 = backends.Choice("torch", "bf16")

# Seconds per probe-set forward, free of interference: openvino/bf16 is the fastest.
COSTS = {TORCH: 0.030, ONNX: 0.020, OV_FP32: 0.015, OV_BF16: 0.010, TORCH_BF16: 0.025}
OUTPUT = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)


@dataclass
class Stall:
    """Forwards starting in [start, end) run ``factor`` times slower."""

    start: float
    end: float
    factor: float


class FakeClock:
    def __init__(self, stalls: tuple[Stall, ...] = ()) -> None:
        self.now = 0.0
        self.stalls = stalls
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def run(self, cost: float) -> None:
        factor = 1.0
        for stall in self.stalls:
            if stall.start <= self.now < stall.end:
                factor = stall.factor
        self.now += cost * factor


class ScriptedRunner(backends.Runner):
    def __init__(self, choice: backends.Choice, clock: FakeClock, costs: Mapping[backends.Choice, float]) -> None:
        self.choice = choice
        self.effective_precision = choice.precision
        self.clock = clock
        self.cost = costs[choice]
        self.closed = False

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        assert not self.closed
        self.clock.run(self.cost)
        # torch bf16 misses the tolerance, as it does on MiniLM.
        return OUTPUT + (0.5 if self.choice == TORCH_BF16 else 0.0)

    def close(self) -> None:
        self.closed = True


class StubGraph(backends.Graph):
    kind = "stub"
    inputs = ("input_ids",)
    output = "out"

    def build_module(self) -> Any:  # pragma: no cover - the runners are scripted
        raise AssertionError("no torch module in these tests")


@dataclass
class Harness:
    graph: StubGraph
    request: backends.BackendRequest
    opened: list[ScriptedRunner]


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    opened: list[ScriptedRunner] = []
    monkeypatch.setattr(backends, "available", lambda choice: True)
    harness = Harness(StubGraph(folder), backends.BackendRequest(backend="auto", cache_dir=tmp_path / "cache"), opened)
    return harness


def script(monkeypatch: pytest.MonkeyPatch, harness: Harness, clock: FakeClock, costs: Mapping[Any, float]) -> None:
    def open_runner(graph: Any, choice: backends.Choice, request: Any, store: Any) -> backends.Runner:
        runner = ScriptedRunner(choice, clock, costs)
        harness.opened.append(runner)
        return runner

    monkeypatch.setattr(backends, "open_runner", open_runner)


def evaluate(runner: backends.Runner) -> np.ndarray:
    return runner({})


def choose(harness: Harness, clock: FakeClock) -> tuple[backends.Runner, dict[str, Any]]:
    return backends.choose(
        harness.graph, harness.request, evaluate, backends.cosine_agreement(0.9999), 0.9999, clock=clock
    )


@pytest.mark.xfail(strict=True, reason="auto times candidates one after another: the stall picks openvino/fp32")
def test_one_stall_during_a_candidates_slot_does_not_pick_a_slower_backend(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process takes the core from 0.262 s to 0.40 s, slowing every forward
    # started then four times. Timed one candidate after another (three forwards
    # each, min), that stretch was exactly openvino/bf16's slot: it measured 40 ms
    # and openvino/fp32 (15 ms) won, a choice then recorded for every later start.
    # Interleaved rounds spread the stall over all candidates, one or two samples
    # each, and the medians still see openvino/bf16 as the fastest.
    clock = FakeClock((Stall(0.262, 0.40, 4.0),))
    script(monkeypatch, harness, clock, COSTS)
    runner, runtime = choose(harness, clock)
    assert runner.choice == OV_BF16
    assert (runtime["backend"], runtime["precision"]) == ("openvino", "bf16")
