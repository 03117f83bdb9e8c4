"""The in-process benchmarks' shared timing loop (scripts/bench_timing.py), on a fake clock:
items/s per arm and batch size, the best of the interleaved rounds, one warm call each."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_timing.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_timing", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_items_per_second_is_the_best_round_per_arm_and_batch_size() -> None:
    timing = load()
    clock = Clock()
    calls: list[tuple[str, int]] = []
    # "slow" takes 0.5 s per item in its warm call and first round at batch 1 (17 calls), 0.25 s after.

    def slow(batch: list[str]) -> np.ndarray:
        calls.append(("slow", len(batch)))
        clock.now += len(batch) * (0.5 if sum(name == "slow" for name, _ in calls) <= 17 else 0.25)
        return np.zeros(len(batch))

    def fast(batch: list[str]) -> np.ndarray:
        calls.append(("fast", len(batch)))
        clock.now += 0.1
        return np.zeros(len(batch))

    texts = [f"t{i}" for i in range(16)]
    results = timing.items_per_second({"slow": slow, "fast": fast}, texts, rounds=2, sizes=(1, 8), clock=clock)
    assert set(results) == {"batch 1", "batch 8"}
    # fast: 16 calls of 0.1 s at batch 1 (10 items/s), 2 calls at batch 8 (80 items/s).
    assert results["batch 1"]["fast"] == 10.0
    assert results["batch 8"]["fast"] == 80.0
    # slow: its better round at 0.25 s per item, 4 items/s, whatever the batch.
    assert results["batch 1"]["slow"] == 4.0
    assert results["batch 8"]["slow"] == 4.0
    # One warm call per arm and size, then every arm once per round, interleaved.
    assert calls[:2] == [("slow", 1), ("fast", 1)]
    assert len(calls) == 2 + 2 * (16 + 16) + 2 + 2 * (2 + 2)


def test_largest_differences_compare_every_arm_with_the_library() -> None:
    timing = load()

    def library(batch: list[str]) -> np.ndarray:
        return np.arange(len(batch), dtype=np.float64)

    def off(batch: list[str]) -> np.ndarray:
        return library(batch) + np.array([0.0, -0.25, 0.125])[: len(batch)]

    worst = timing.largest_differences({"off": off, "library": library}, library, ["a", "b", "c"])
    assert worst == {"off": 0.25, "library": 0.0}


def test_the_report_is_printed_and_written_with_the_affinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timing = load()
    path = tmp_path / "out.json"
    document = timing.report({"batch 1": {"a": 1.0}}, path, tokens={"min": 3})
    written = json.loads(path.read_text())
    assert written == document
    assert json.loads(capsys.readouterr().out) == document
    assert list(written) == ["items_per_s", "tokens", "affinity"]
    assert written["affinity"] and all(isinstance(cpu, int) for cpu in written["affinity"])


def test_the_corpus_is_the_same_on_every_run() -> None:
    timing = load()
    texts = timing.corpus(["a", "b", "c"], 5)
    assert texts == timing.corpus(["a", "b", "c"], 5)
    assert [len(t.split()) for t in texts] == [6, 11, 16, 7, 12]
    assert texts[0] == "a b c a b c"
