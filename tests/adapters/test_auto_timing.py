"""``auto``'s timing on a scripted clock: no model runs and no real time is measured.

Each fake runner advances a fake clock by its cost per forward; a "stall" (another
process holding the core for a stretch of wall time) multiplies the cost of every
forward that starts inside it. So each test says exactly what the timing loop sees,
and nothing here depends on how fast this machine is."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.backends import agreement, report, timing
from sift_server.adapters.backends import choice as choosing
from sift_server.adapters.backends import request as vocabulary
from sift_server.adapters.backends import store as stores
from sift_server.adapters.backends.request import REFERENCE, Choice
from sift_server.adapters.backends.seam import Graph, Runner

TORCH = REFERENCE
ONNX = Choice("onnx", "fp32")
OV_FP32 = Choice("openvino", "fp32")
OV_BF16 = Choice("openvino", "bf16")
TORCH_BF16 = Choice("torch", "bf16")

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


class ScriptedRunner(Runner):
    def __init__(self, choice: Choice, clock: FakeClock, costs: Mapping[Choice, float]) -> None:
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


class StubGraph(Graph):
    kind = "stub"
    inputs = ("input_ids",)
    output = "out"

    def build_module(self) -> Any:  # pragma: no cover - the runners are scripted
        raise AssertionError("no torch module in these tests")


@dataclass
class Harness:
    graph: StubGraph
    request: vocabulary.BackendRequest
    opened: list[ScriptedRunner]


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    opened: list[ScriptedRunner] = []
    monkeypatch.setattr(vocabulary, "available", lambda choice: True)
    harness = Harness(
        StubGraph(folder), vocabulary.BackendRequest(backend="auto", cache_dir=tmp_path / "cache"), opened
    )
    return harness


def script(monkeypatch: pytest.MonkeyPatch, harness: Harness, clock: FakeClock, costs: Mapping[Any, float]) -> None:
    def open_runner(graph: Any, choice: Choice, request: Any, store: Any) -> Runner:
        runner = ScriptedRunner(choice, clock, costs)
        harness.opened.append(runner)
        return runner

    monkeypatch.setattr(stores, "open_runner", open_runner)


def evaluate(runner: Runner) -> np.ndarray:
    return runner({})


def choose(harness: Harness, clock: FakeClock) -> tuple[Runner, dict[str, Any]]:
    return choosing.choose(
        harness.graph, harness.request, evaluate, agreement.cosine_agreement(0.9999), 0.9999, clock=clock
    )


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


def test_without_interference_the_medians_are_the_costs(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    _, runtime = choose(harness, clock)
    measured = runtime["measured"]
    for choice in (TORCH, ONNX, OV_FP32, OV_BF16):
        assert measured[str(choice)]["seconds"] == pytest.approx(COSTS[choice])
        assert measured[str(choice)]["samples"] == pytest.approx([COSTS[choice]] * timing.TIMING_ROUNDS)
    assert measured[str(TORCH_BF16)]["passed"] is False
    assert "seconds" not in measured[str(TORCH_BF16)]  # missed the tolerance: never timed
    assert runtime["timing"]["rounds"] == timing.TIMING_ROUNDS
    assert runtime["timing"]["statistic"] == "median"
    assert runtime["timing"]["fastest"] == str(OV_BF16)
    # Every runner but the chosen one was closed.
    assert [r.choice for r in harness.opened if not r.closed] == [OV_BF16]


def test_rounds_interleave_the_passing_candidates_in_rotated_order(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    calls: list[Choice] = []

    def recording(runner: Runner) -> np.ndarray:
        calls.append(runner.choice)
        return runner({})

    choosing.choose(harness.graph, harness.request, recording, agreement.cosine_agreement(0.9999), 0.9999, clock=clock)
    checks, timed = calls[:5], calls[5:]  # one agreement forward per candidate, then the rounds
    assert checks == [TORCH, ONNX, OV_FP32, OV_BF16, TORCH_BF16]
    passing = [TORCH, ONNX, OV_FP32, OV_BF16]
    rounds = [timed[i : i + len(passing)] for i in range(0, len(timed), len(passing))]
    assert rounds == [timing.timing_order(passing, r) for r in range(timing.TIMING_ROUNDS)]
    assert [r[0] for r in rounds] == [TORCH, ONNX, OV_FP32, OV_BF16, TORCH]


def test_timing_order_rotates() -> None:
    assert timing.timing_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert timing.timing_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert timing.timing_order(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert timing.timing_order([], 3) == []


PREFERENCE = [TORCH, ONNX, OV_FP32, OV_BF16]


def test_pick_uses_the_median_so_two_disturbed_samples_do_not_decide() -> None:
    samples = {ONNX: [0.020, 0.021, 0.020, 0.019, 0.020], OV_BF16: [0.010, 0.090, 0.011, 0.080, 0.010]}
    verdict = timing.pick(samples, PREFERENCE, 0.05)
    assert verdict.choice == OV_BF16
    assert verdict.medians[OV_BF16] == pytest.approx(0.011)


def test_pick_prefers_the_earlier_candidate_within_the_margin() -> None:
    # 3 % apart: as fast as a few rounds can tell, so the preferred (fp32) one, whichever
    # happened to measure faster this time.
    for fp32, bf16 in ((0.0103, 0.0100), (0.0100, 0.0103)):
        verdict = timing.pick({OV_FP32: [fp32] * 5, OV_BF16: [bf16] * 5}, PREFERENCE, 0.05)
        assert verdict.choice == OV_FP32
    # 20 % apart: the faster one.
    verdict = timing.pick({OV_FP32: [0.012] * 5, OV_BF16: [0.010] * 5}, PREFERENCE, 0.05)
    assert (verdict.choice, verdict.fastest) == (OV_BF16, OV_BF16)


def test_pick_measures_the_margin_from_the_fastest() -> None:
    # torch is within 5 % of onnx but not of the fastest: the margin never chains.
    samples = {TORCH: [0.0106] * 5, ONNX: [0.0102] * 5, OV_BF16: [0.0100] * 5}
    verdict = timing.pick(samples, PREFERENCE, 0.05)
    assert (verdict.choice, verdict.fastest) == (ONNX, OV_BF16)


def test_pick_depends_only_on_the_samples() -> None:
    samples = {TORCH: [0.03, 0.031, 0.029], ONNX: [0.02, 0.05, 0.021], OV_FP32: [0.0205, 0.0206, 0.0204]}
    reordered = dict(reversed(list(samples.items())))
    assert timing.pick(samples, PREFERENCE, 0.05) == timing.pick(reordered, PREFERENCE, 0.05)
    with pytest.raises(ValueError):
        timing.pick({}, PREFERENCE, 0.05)


def test_the_decision_records_the_figures_and_logs_them(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    with caplog.at_level(logging.INFO, logger=choosing.log.name):
        choose(harness, clock)
    [line] = [r.getMessage() for r in caplog.records if "interleaved rounds" in r.getMessage()]
    assert "backend openvino/bf16" in line
    assert "openvino/bf16 10.0 ms, openvino/fp32 15.0 ms, onnx/fp32 20.0 ms, torch/fp32 30.0 ms" in line
    assert "torch/bf16" in line  # named as missing the tolerance
    assert harness.request.cache_dir is not None
    [path] = (harness.request.cache_dir / "decisions").glob("*.json")
    record = json.loads(path.read_text())
    assert record["choice"] == "openvino/bf16"
    assert record["timing"]["rounds"] == timing.TIMING_ROUNDS
    assert record["measured"]["onnx/fp32"]["seconds"] == pytest.approx(0.020)
    assert len(record["measured"]["onnx/fp32"]["samples"]) == timing.TIMING_ROUNDS


class NoClock:
    def __call__(self) -> float:
        raise AssertionError("a recorded decision must not be timed again")


def test_a_recorded_decision_is_reused_without_timing(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    _, first = choose(harness, clock)
    harness.opened.clear()
    forwards: list[Choice] = []

    def counting(runner: Runner) -> np.ndarray:
        forwards.append(runner.choice)
        return runner({})

    runner, again = choosing.choose(
        harness.graph, harness.request, counting, agreement.cosine_agreement(0.9999), 0.9999, clock=NoClock()
    )
    assert runner.choice == OV_BF16 and forwards == []
    assert [r.choice for r in harness.opened] == [OV_BF16]  # nothing else opened
    assert again["selected_by"] == "auto (recorded)"
    assert again["measured"] == first["measured"] and again["timing"] == first["timing"]
    assert again["decided_at"] == first["decided_at"]


def test_only_the_reference_passing_is_not_timed(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)

    def only_the_reference_agrees(runner: Runner) -> np.ndarray:
        out = runner({})
        return out if runner.choice == TORCH else out + 1.0

    runner, runtime = choosing.choose(
        harness.graph,
        harness.request,
        only_the_reference_agrees,
        agreement.cosine_agreement(0.9999),
        0.9999,
        clock=NoClock(),
    )
    assert runner.choice == TORCH
    assert runtime["timing"]["rounds"] == 0


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # What this process already decided again is module state: start from none.
    monkeypatch.setattr(choosing, "_REDECIDED", set())


@pytest.mark.usefixtures("fresh_process")
def test_rechoose_decides_again_once_and_records_it(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    first, _ = choose(harness, clock)
    assert first.choice == OV_BF16
    # The machine changed (say, another tenant now shares its cache): onnx is now the fastest.
    script(monkeypatch, harness, clock, {**COSTS, ONNX: 0.005})
    assert choose(harness, NoClock())[0].choice == OV_BF16  # without asking: the recorded one
    harness.request = dataclasses.replace(harness.request, rechoose=True)
    again, runtime = choose(harness, clock)
    assert again.choice == ONNX and runtime["selected_by"] == "auto"
    # Recorded for later starts, and a reload in this process (eviction) does not time again.
    reloaded, runtime = choose(harness, NoClock())
    assert reloaded.choice == ONNX and runtime["selected_by"] == "auto (recorded)"
    harness.request = dataclasses.replace(harness.request, rechoose=False)
    assert choose(harness, NoClock())[0].choice == ONNX


def test_rechoose_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sift_server.adapters.base import LoadContext
    from sift_server.registry import loader
    from sift_server.registry.catalog import load_spec

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\nadapter: sentence-embedder\nsource: {{path: {folder}}}\ntasks: [encode]\n")
    seen: list[bool] = []

    class Recorder:
        transformers_models = False

        @classmethod
        def load(cls, ctx: LoadContext) -> Any:
            seen.append(ctx.rechoose_backend)

    monkeypatch.setattr(loader, "adapter_class", lambda name: Recorder)
    from sift_server.config import Settings

    for value, expected in (("1", True), ("true", True), ("0", False), ("", False)):
        monkeypatch.setenv("SIFT_RECHOOSE_BACKEND", value)
        loader.load_adapter(load_spec(path), torch_threads=1, rechoose_backend=Settings().rechoose_backend)
        assert seen.pop() is expected
    monkeypatch.delenv("SIFT_RECHOOSE_BACKEND")
    loader.load_adapter(load_spec(path), torch_threads=1, rechoose_backend=Settings().rechoose_backend)
    assert seen.pop() is False


def test_the_log_line_says_when_the_margin_chose() -> None:
    measured = {
        "openvino/fp32": {"agreement": 0.99999, "passed": True, "seconds": 0.0103},
        "openvino/bf16": {"agreement": 0.99995, "passed": True, "seconds": 0.0100},
    }
    timing = {"rounds": 5, "margin": 0.05, "tolerance": 0.9999, "fastest": "openvino/bf16"}
    line = report.summary("sentence-embedder", OV_FP32, measured, timing)
    assert line == (
        "sentence-embedder: backend openvino/fp32 (median of 5 interleaved rounds: openvino/bf16 10.0 ms, "
        "openvino/fp32 10.3 ms); preferred to openvino/bf16, within 5% of it"
    )
    untimed = report.summary("x", TORCH, {"torch/fp32": {"agreement": 1.0, "passed": True}}, {"rounds": 0})
    assert untimed == "x: backend torch/fp32 (the only candidate within tolerance: not timed)"


def test_a_damaged_decision_record_still_loads(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    choose(harness, clock)
    assert harness.request.cache_dir is not None
    [path] = (harness.request.cache_dir / "decisions").glob("*.json")
    path.write_text(json.dumps({"choice": "openvino/bf16", "measured": {"onnx/fp32": "?"}, "timing": [1]}))
    runner, runtime = choose(harness, NoClock())
    assert runner.choice == OV_BF16 and runtime["selected_by"] == "auto (recorded)"


def test_a_backend_named_without_a_precision_chooses_among_that_backends_precisions(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `backend: openvino` with no precision: the candidates are openvino's own
    # precisions; torch fp32 is opened only as the agreement reference and must
    # never be chosen (nor crash the choice, as a KeyError did).
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    harness.request = vocabulary.BackendRequest(backend="openvino", cache_dir=harness.request.cache_dir)
    runner, runtime = choose(harness, clock)
    assert runner.choice == OV_BF16
    assert "seconds" not in runtime["measured"][str(TORCH)]  # the reference is not a candidate: not timed
    assert [r.choice for r in harness.opened if not r.closed] == [OV_BF16]


def test_a_backend_named_without_a_precision_with_one_candidate_takes_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    script(monkeypatch, harness, clock, COSTS)
    harness.request = vocabulary.BackendRequest(backend="onnx", cache_dir=harness.request.cache_dir)
    runner, _ = choose(harness, clock)
    assert runner.choice == ONNX
    assert [r.choice for r in harness.opened if not r.closed] == [ONNX]
