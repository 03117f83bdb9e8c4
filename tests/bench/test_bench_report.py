"""Analysis, targets and report files from synthetic runs (no server)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from sift_bench.report.analysis import analyze, find_ratio, run_phase_stats
from sift_bench.report.markdown import console_summary
from sift_bench.report.tables import md_table, text_table
from sift_bench.report.targets import evaluate, needed_one_forward
from sift_bench.run.join import join_requests
from sift_bench.run.phases import PhasePlan, PhaseResult, RequestRecord
from sift_bench.run.runner import SCHEMA, finish, phase_to_dict
from sift_server.engine.trace import ForwardRecord

PHASES = ["sequential", "burst8", "closed8"]


class Builder:
    """Requests and forwards of one synthetic run on a fake timeline."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.t = 100.0
        self.records: list[ForwardRecord] = []
        self.count = 0

    def forward(self, ids: list[str], queue_s: float, forward_s: float) -> tuple[float, float]:
        start = self.t + queue_s
        end = start + forward_s
        self.records.append(
            ForwardRecord(
                model="m", lane="default", forward_id=len(self.records), reason="lone", request_ids=ids,
                arrivals=[self.t - 0.0005] * len(ids), admitted=[self.t] * len(ids), items=len(ids),
                cost=len(ids), decided=start, start=start, end=end,
            )
        )  # fmt: skip
        self.t = end + 0.001
        return start, end

    def requests(self, n: int, group: int, queue_s: float, forward_s: float, ok: bool = True) -> list[RequestRecord]:
        ids = [f"{self.tag}-{self.count + i}" for i in range(n)]
        self.count += n
        send = self.t - 0.001
        _, end = self.forward(ids, queue_s, forward_s)
        return [
            RequestRecord(i, group, send, end + 0.001, ok, 200 if ok else 500, None if ok else "HTTP 500") for i in ids
        ]


def make_run(arm: str, trial: int, speed: float, *, valid: bool = True, drop_from_trace: int = 0) -> dict[str, Any]:
    b = Builder(f"{arm}-{trial}")
    seq = PhaseResult("sequential", "sequential", 1)
    for _ in range(20):
        seq.requests += b.requests(1, -1, 0.0001, 0.01)
    burst = PhaseResult("burst8", "burst", 8)
    one = b.requests(8, 0, 0.001, 0.02)
    split = b.requests(1, 1, 0.0001, 0.01) + b.requests(7, 1, 0.0001, 0.02)
    burst.requests = one + split
    burst.groups = [[r.request_id for r in one], [r.request_id for r in split]]
    closed = PhaseResult("closed8", "closed", 8, start=b.t)
    for k in range(10):
        closed.requests += b.requests(8, k % 8, 0.0, 0.08 / speed, ok=valid or k != 3)
    closed.end = max(r.recv for r in closed.requests)
    records = b.records[drop_from_trace:] if drop_from_trace else b.records
    phases = [seq, burst, closed]
    join = join_requests([r.request_id for p in phases for r in p.requests], records)
    return {
        "arm": arm, "trial": trial, "position": 0, "valid": valid, "problems": [] if valid else ["1 invalid"],
        "phases": {p.name: phase_to_dict(p, join) for p in phases}, "requests": sum(len(p.requests) for p in phases),
        "joined": len(join.joined), "forwards": len(records),
    }  # fmt: skip


def make_results(runs: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    plan = PhasePlan(sequential=20, bursts=2, burst_sizes=(8,), concurrencies=(8,), closed_seconds=1.0)
    return {
        "schema": SCHEMA,
        "meta": {"started": "now", "host": "test", "python": "3", "worktree": {}, "loadavg_start": None},
        "config": {
            "model": "m", "trials": 2, "client": "httpx", "server_cpus": None, "client_cpus": None,
            "torch_threads": 1, "items_per_request": 1, "plan": asdict(plan),
            "phases": PHASES,
        },
        "arms": [{"name": a, "policy": a, "kind": "policy"} for a in arms],
        "orders": [arms, list(reversed(arms))],
        "runs": runs,
        "ceiling": {"best": {"size": 8, "items_per_s": 100.0}, "torch_threads": 1, "cpus": None,
                    "sizes": {"1": {"median_s": 0.01, "items_per_s": 100.0}}},
        "warnings": [],
    }  # fmt: skip


def test_run_phase_stats() -> None:
    run = make_run("adaptive", 0, 1.0)
    seq = run_phase_stats(run["phases"]["sequential"])
    assert seq["requests"] == seq["valid"] == seq["joined"] == 20
    assert seq["missing"] == 0
    assert seq["queue_ms"][0] == pytest.approx(0.1)
    assert seq["ingress_ms"][0] == pytest.approx(0.5)
    assert seq["forward_ms"][0] == pytest.approx(10.0)
    burst = run_phase_stats(run["phases"]["burst8"])
    assert burst["patterns"] == ["[8]", "[1, 7]"]
    assert burst["one_forward"] == 1 and burst["bursts"] == 2
    assert burst["forwards_per_burst"] == [1, 2]
    closed = run_phase_stats(run["phases"]["closed8"])
    assert closed["throughput"] == pytest.approx(80 / (run["phases"]["closed8"]["window_end"]
                                                      - run["phases"]["closed8"]["window_start"]))  # fmt: skip
    assert closed["tail_ratio"] == pytest.approx(1.0)


def test_missing_trace_lines_are_counted() -> None:
    run = make_run("adaptive", 0, 1.0, drop_from_trace=2)
    seq = run_phase_stats(run["phases"]["sequential"])
    assert seq["missing"] == 2
    assert seq["joined"] == 18
    assert len(seq["queue_ms"]) == 18
    assert len(seq["latency_ms"]) == 20


def test_analysis_ratios_targets_and_invalid_runs(tmp_path: Path) -> None:
    runs = [
        make_run("adaptive", 0, 1.2),
        make_run("timed", 0, 1.0),
        make_run("adaptive", 1, 1.1),
        make_run("timed", 1, 1.0),
        make_run("immediate", 0, 1.0, valid=False),
    ]
    results = make_results(runs, ["adaptive", "timed", "immediate"])
    analysis = analyze(results)
    summary = analysis["summary"]
    assert summary["adaptive"]["valid_trials"] == 2
    assert summary["immediate"]["valid_trials"] == 0
    assert "closed8" not in summary["immediate"]
    assert summary["adaptive"]["burst8"]["patterns"] == {"[8]": 2, "[1, 7]": 2}
    assert summary["adaptive"]["burst8"]["one_forward"] == 2
    ratio = find_ratio(analysis["ratios"], "closed8", "adaptive", "timed")
    assert ratio is not None and ratio["n"] == 2
    assert 1.05 < ratio["ratio"] < 1.25
    inverse = find_ratio(analysis["ratios"], "closed8", "timed", "adaptive")
    assert inverse is not None and inverse["ratio"] == pytest.approx(1 / ratio["ratio"])
    none = find_ratio(analysis["ratios"], "closed8", "adaptive", "immediate")
    assert none is None
    assert analysis["batch_sizes_seen"] == [1, 7, 8]

    targets = evaluate(analysis, results["ceiling"], PHASES)
    by_name = {t["target"]: t for t in targets["adaptive"]}
    assert by_name["sequential queue p95"]["status"] == "met"
    assert by_name["bursts of 8 in one forward"]["status"] == "not met"
    assert by_name["bursts of 8 in one forward"]["value"] == "1/2, 1/2"
    assert by_name["throughput at 8 vs timed"]["status"] == "met"
    # The fixed p99/p50 ratio is no target any more; dominance needs a reference arm.
    assert not any("tail" in name or "dominates" in name for name in by_name)
    assert "throughput at 8 vs timed" not in {t["target"] for t in targets["timed"]}
    assert {t["status"] for t in targets["immediate"]} == {"n/a"}


def test_needed_one_forward_scales_23_of_24() -> None:
    assert needed_one_forward(24) == 23
    assert needed_one_forward(48) == 46
    assert needed_one_forward(2) == 2
    assert needed_one_forward(6) == 6


def test_finish_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    runs = [make_run("adaptive", 0, 1.0), make_run("timed", 0, 1.0)]
    results = finish(make_results(runs, ["adaptive", "timed"]), tmp_path)
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["analysis"]["summary"]["adaptive"]["valid_trials"] == 1
    assert stored["targets"]["adaptive"]
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Validity", "## Summary", "## Targets", "## Throughput ratios", "### burst8", "## Plots"):
        assert heading in report
    for name in results["files"]["plots"]:
        assert (tmp_path / name).stat().st_size > 1000
    text = console_summary(results)
    assert "adaptive" in text and "targets" in text and "all 2 runs valid" in text


def test_tables() -> None:
    assert text_table(["a", "bb"], [["xxx", "y"]]).splitlines() == ["a    bb", "---  --", "xxx  y "]
    assert md_table(["a"], [["x|y"]]).splitlines()[-1] == "| x\\|y |"
