"""The per-trial in-process replay: which forwards it runs with which texts, how
the child runs them (on a fake adapter), the paired ratio, the target and the
report section. No server, no model."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sift_bench.report.analysis import analyze
from sift_bench.report.markdown import markdown, summary_rows
from sift_bench.report.replay_analysis import replay_figures
from sift_bench.report.stats import geometric_ratio
from sift_bench.report.targets import evaluate
from sift_bench.run.ceiling import load_model, runtime_of
from sift_bench.run.replay import ReplaySetup, build_forward, combine, describe, replay_env, replay_phase, server_cut
from sift_bench.run.replay_plan import ReplayForward, cap, phase_forwards, plan_phase
from sift_server.adapters.base import EncodeTask, Part, Prepared
from sift_server.engine.trace import ForwardRecord
from tests.bench.test_bench_report import make_results, make_run
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry


def record(forward_id: int, ids: list[str], items: int, start: float, *, error: str | None = None) -> ForwardRecord:
    return ForwardRecord(
        model="m", lane="default", forward_id=forward_id, reason="full", request_ids=ids,
        arrivals=[0.0] * len(ids), admitted=[0.0] * len(ids), items=items, cost=items, decided=start,
        start=start, end=start + 0.01 * items, error=error,
    )  # fmt: skip


TEXTS = {
    "a": ["a0"],
    "b": ["b0"],
    "c": ["c0"],
    "big": ["big0", "big1", "big2", "big3", "big4"],
    "other-phase": ["x0"],
}


def test_forwards_come_in_start_order_with_each_requests_texts_in_its_groups() -> None:
    records = [
        record(2, ["c", "b"], 2, start=3.0),  # written out of start order
        record(0, ["a"], 1, start=1.0),
        record(9, ["other-phase"], 1, start=2.0),  # no request of this phase: not replayed
        record(5, ["b"], 1, start=2.5, error="RuntimeError: boom"),  # failed: not replayed
    ]
    plan = phase_forwards(records, ["a", "b", "c"], TEXTS)
    assert [f.forward_id for f in plan.forwards] == [0, 2]
    assert [f.parts for f in plan.forwards] == [(("a0",),), (("c0",), ("b0",))]
    assert plan.total_forwards == 2 and plan.total_items == 3
    assert plan.busy_s == pytest.approx(0.03)
    assert (plan.not_in_trace, plan.unknown_parts, plan.unmatched_items) == (0, 0, 0)


def test_a_split_request_takes_its_next_texts_in_each_forward() -> None:
    # The head alone over the cost cap: 3 of its items, then the other 2, then a whole forward.
    records = [record(0, ["big"], 3, 1.0), record(1, ["big"], 2, 2.0), record(2, ["a", "b"], 2, 3.0)]
    plan = phase_forwards(records, ["big", "a", "b"], TEXTS)
    assert [f.parts for f in plan.forwards] == [
        (("big0", "big1", "big2"),),
        (("big3", "big4"),),
        (("a0",), ("b0",)),
    ]
    assert [f.items for f in plan.forwards] == [3, 2, 2]


def test_requests_missing_from_the_trace_or_unknown_to_the_bench_are_counted_not_replayed() -> None:
    records = [record(0, ["a", "stranger"], 2, 1.0), record(1, ["b", "c"], 5, 2.0)]
    plan = phase_forwards(records, ["a", "b", "c", "lost"], TEXTS)
    assert [f.parts for f in plan.forwards] == [(("a0",),), (("b0",), ("c0",))]
    assert plan.not_in_trace == 1  # "lost": no forward names it
    assert plan.unknown_parts == 1  # "stranger": the bench did not send it
    # Forward 0: the stranger's item; forward 1 reported 5 items where its requests hold 2 texts.
    assert plan.unmatched_items == 1 + 3


def test_the_cap_keeps_every_kth_forward_within_the_server_time() -> None:
    forwards = [ReplayForward(i, (("t",),), 0.5, 1) for i in range(10)]  # 5 s in all
    kept, stride = cap(forwards, 2.0, 100)
    assert stride == 3 and [f.forward_id for f in kept] == [0, 3, 6, 9]
    kept, stride = cap(forwards, 10.0, 4)
    assert stride == 3 and len(kept) == 4
    assert cap(forwards, 10.0, 100) == (forwards, 1)


def test_plan_phase_summary_has_the_servers_time_per_item_of_the_replayed_forwards() -> None:
    records = [record(i, [k], 1, float(i)) for i, k in enumerate(["a", "b", "c"])]
    plan = plan_phase("closed8", records, ["a", "b", "c"], TEXTS, window_s=0.06, cap_s=0.02)
    summary = plan.summary()
    assert plan.stride == 2 and [f.forward_id for f in plan.forwards] == [0, 2]
    assert summary["items"] == 2 and summary["total_items"] == 3
    assert summary["server_ms_per_item"] == pytest.approx(10.0)
    assert summary["busy_fraction"] == pytest.approx(0.5)
    assert plan.child_input() == [
        {"forward_id": 0, "parts": [["a0"]], "chunks": 1},
        {"forward_id": 2, "parts": [["c0"]], "chunks": 1},
    ]


class FakeAdapter:
    """Prepares one item per text (its cost: the text's length) and records
    every forward call as the texts of its parts."""

    def __init__(self) -> None:
        self.calls: list[list[list[str]]] = []

    def prepare(self, task: EncodeTask) -> Prepared:
        return Prepared([len(t) for t in task.texts], None, list(task.texts))

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        self.calls.append([p.prepared.payload[p.start : p.stop] for p in parts])
        return [[0.0] * (p.stop - p.start) for p in parts]


def _prepare(adapter: FakeAdapter) -> Any:
    return lambda texts: adapter.prepare(EncodeTask(texts))


def test_replay_runs_the_same_texts_in_order_in_the_same_groups() -> None:
    adapter = FakeAdapter()
    forwards = [[["a", "bb"], ["c"]], [["dddd"]], [["e"], ["f"]]]
    ticks = itertools.count()
    out = replay_phase(adapter, forwards, _prepare(adapter), None, passes=2, warm=1, clock=lambda: float(next(ticks)))
    one_pass = [[["a", "bb"], ["c"]], [["dddd"]], [["e"], ["f"]]]
    assert adapter.calls == one_pass[:1] + one_pass + one_pass  # warm-up of the first, then two passes
    # The fake clock ticks once per reading: every forward "takes" one second.
    assert out["pass_s"] == [3.0, 3.0] and out["seconds"] == 3.0
    assert (out["items"], out["forwards"], out["sub_forwards"]) == (6, 3, 3)
    assert out["items_per_s"] == pytest.approx(2.0)
    assert out["ms_per_item"] == pytest.approx(500.0)


def test_a_forward_is_cut_into_sub_forwards_as_the_server_cuts_it() -> None:
    adapter = FakeAdapter()
    long_text = "x" * 100
    # A small fixed cost: the long item alone, the short ones together, shortest first.
    chunks, how = build_forward(_prepare(adapter), [["ab", long_text], ["cd"]], fixed_tokens=1.0)
    assert [[p.prepared.payload[p.start : p.stop] for p in chunk] for chunk in chunks] == [
        [["ab"], ["cd"]],
        [[long_text]],
    ]
    assert how == "own"
    # Unknown fixed cost: one call over whole parts, as the server runs an uncut batch.
    whole, _ = build_forward(_prepare(adapter), [["ab", long_text], ["cd"]], fixed_tokens=None)
    assert [[(p.start, p.stop) for p in chunk] for chunk in whole] == [[(0, 2), (0, 1)]]


def test_the_replay_cuts_a_forward_into_as_many_sub_forwards_as_the_server_did() -> None:
    costs = [2, 100, 2]
    # The child's own fixed cost cuts in two; the server ran it whole (its learned cost was higher).
    assert server_cut(costs, 1.0, None) == ([[0, 2], [1]], "own")
    assert server_cut(costs, 1.0, 2) == ([[0, 2], [1]], "own")
    assert server_cut(costs, 1.0, 1) == ([[0, 1, 2]], "matched")
    # No fixed cost makes three sub-forwards of two length classes: the child's own cut stays.
    assert server_cut(costs, 1.0, 3) == ([[0, 2], [1]], "differs")
    adapter = FakeAdapter()
    out = replay_phase(adapter, [[["ab", "x" * 100], ["cd"]]], _prepare(adapter), 1.0, chunks=[1], passes=1, warm=0)
    assert adapter.calls == [[["ab", "x" * 100], ["cd"]]]
    assert out["sub_forwards"] == 1 and out["cuts"] == {"own": 0, "matched": 1, "differs": 0}


def _replay_block(rate_by_phase: dict[str, float], server_ms: float = 10.0) -> dict[str, Any]:
    phases = {}
    for phase, rate in rate_by_phase.items():
        phases[phase] = {
            "forwards": 4, "items": 20, "total_forwards": 8, "total_items": 40, "stride": 2,
            "server_ms_per_item": server_ms, "server_chunks": 4, "busy_fraction": 0.9, "not_in_trace": 0,
            "replay": {"items": 20, "forwards": 4, "sub_forwards": 4, "pass_s": [20 / rate, 20 / rate],
                       "seconds": 20 / rate, "items_per_s": rate, "ms_per_item": 1000 / rate},
        }  # fmt: skip
    return {"runtime": "torch fp32", "phases": phases}


def test_per_trial_ratio_and_its_interval() -> None:
    runs = [
        {"arm": "adaptive", "trial": 0, "valid": True, "replay": _replay_block({"closed8": 100.0})},
        {"arm": "adaptive", "trial": 1, "valid": True, "replay": _replay_block({"closed8": 80.0})},
        {"arm": "adaptive", "trial": 2, "valid": False, "replay": _replay_block({"closed8": 1.0})},
        {"arm": "adaptive", "trial": 3, "valid": True, "replay": {"error": "replay failed"}},
        {"arm": "timed", "trial": 0, "valid": True},
    ]
    served = {("adaptive", 0): {"closed8": {"throughput": 90.0}}, ("adaptive", 1): {"closed8": {"throughput": 76.0}},
              ("adaptive", 2): {"closed8": {"throughput": 50.0}}, ("adaptive", 3): {"closed8": {"throughput": 50.0}},
              ("timed", 0): {"closed8": {"throughput": 70.0}}}  # fmt: skip
    figures = replay_figures(runs, served)
    assert list(figures) == ["adaptive"]
    data = figures["adaptive"]["closed8"]
    assert [r["trial"] for r in data["per_trial"]] == [0, 1]
    assert [r["ratio"] for r in data["per_trial"]] == pytest.approx([0.9, 0.95])
    expected = geometric_ratio([90.0, 76.0], [100.0, 80.0]).as_dict()
    assert data["ratio"] == expected
    assert data["ratio"]["low"] < data["ratio"]["ratio"] < data["ratio"]["high"]
    # The server's forward took 10 ms an item against the replay's 10 and 12.5 ms.
    assert [r["forward_slowdown"] for r in data["per_trial"]] == pytest.approx([1.0, 0.8])
    assert data["per_trial"][0]["mean_forward_items"] == 5.0


def _with_replays(ratio_of_replay: float) -> dict[str, Any]:
    """Two trials of adaptive and timed, each run with a replay ``ratio_of_replay`` x faster than served."""
    runs = [make_run(arm, t, 1.0) for t in (0, 1) for arm in ("adaptive", "timed")]
    results = make_results(runs, ["adaptive", "timed"])
    served = analyze(results)["summary"]
    for run in runs:
        rates = served[run["arm"]]["closed8"]["throughput"]["per_trial"]
        run["replay"] = _replay_block({"closed8": rates[run["trial"]] * ratio_of_replay})
        run["server_runtime"] = "torch fp32"
    return results


def test_the_ceiling_target_uses_the_paired_ratio_when_a_replay_ran() -> None:
    for replay_speed, status in ((1.0, "met"), (1.25, "not met")):
        results = _with_replays(replay_speed)
        analysis = analyze(results)
        targets = evaluate(analysis, results["ceiling"], results["config"]["phases"])
        row = next(t for t in targets["adaptive"] if t["target"] == "throughput at 8 vs ceiling")
        assert "replay" in row["rule"] and row["status"] == status
        assert row["value"].startswith(f"{1 / replay_speed:.3f} [")
        assert "old curve-based" in row["value"]


def test_without_a_replay_the_ceiling_target_is_the_curve() -> None:
    results = make_results([make_run("adaptive", 0, 1.0)], ["adaptive"])
    targets = evaluate(analyze(results), results["ceiling"], results["config"]["phases"])
    row = next(t for t in targets["adaptive"] if t["target"] == "throughput at 8 vs ceiling")
    assert row["rule"] == ">= 0.95 x best in-process (100.0/s)"
    assert "replay" not in row["value"]


def test_the_report_shows_the_replay_table_and_the_summary_column() -> None:
    results = _with_replays(1.25)
    results["analysis"] = analyze(results)
    results["targets"] = evaluate(results["analysis"], results["ceiling"], results["config"]["phases"])
    text = markdown(results)
    section = text[text.index("## In-process replay") : text.index("## In-process ceiling")]
    rows = [line for line in section.splitlines() if line.startswith("| adaptive | closed8 |")]
    assert len(rows) == 3  # two trials and the geometric mean
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[2] == "1" and cells[5] == "0.800" and cells[6] == "5.0"
    assert cells[7] == "10.00" and cells[-1] == "torch fp32 / torch fp32"
    assert "**0.800 [" in rows[2] and "old, curve:" in rows[2]
    headers, table = summary_rows(results)
    assert table[0][headers.index("c8 /replay")].startswith("0.800 [")


def test_a_failed_replay_is_reported_and_described() -> None:
    results = make_results([make_run("adaptive", 0, 1.0)], ["adaptive"])
    results["runs"][0]["replay"] = {"error": "in-process replay failed: no model\nTraceback"}
    results["analysis"] = analyze(results)
    text = markdown(results)
    assert "- trial 1 adaptive: in-process replay failed: no model" in text
    assert describe(results["runs"][0]["replay"]) == "in-process replay failed: no model"
    block = combine([], {"runtime": "torch fp32", "load_s": 1.0, "fixed_tokens": None, "phases": {}})
    assert describe(block) == "in-process replay: nothing replayed"


def test_the_replay_child_runs_the_backend_its_server_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    # A server started without --backend inherits SIFT_BACKEND; a replay without it ran
    # another backend (and on ``auto`` exported and timed every candidate first).
    setup = ReplaySetup(model="m", catalogs=[], torch_threads=1, cpus=None, workload="short", seed=0)
    monkeypatch.setenv("SIFT_BACKEND", "torch:fp32")
    assert replay_env(setup)["SIFT_BACKEND"] == "torch:fp32"
    assert replay_env(dataclasses.replace(setup, backend="onnx"))["SIFT_BACKEND"] == "onnx"
    monkeypatch.delenv("SIFT_BACKEND")
    assert "SIFT_BACKEND" not in replay_env(setup)
    assert replay_env(dataclasses.replace(setup, backend="openvino:fp32"))["SIFT_BACKEND"] == "openvino:fp32"


def test_the_replay_child_loads_on_the_backend_in_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The child reads SIFT_BACKEND through the server's settings (the loader takes the
    # backend as a value): without it the tiny entry's ``auto`` would time every candidate.
    model_dir = build_tiny_embedder(tmp_path / "model")
    write_catalog_entry(tmp_path / "catalog", model_dir)
    monkeypatch.setenv("SIFT_BACKEND", "torch:fp32")
    monkeypatch.setenv("SIFT_CACHE_DIR", str(tmp_path / "cache"))
    adapter = load_model(TINY_EMBEDDER, [tmp_path / "catalog"], torch_threads=1)
    assert runtime_of(adapter) == "torch fp32"
