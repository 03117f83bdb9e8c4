"""One small bench against real server processes with the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sift_bench.arms.arm import policy_arm
from sift_bench.run.runner import run_bench
from tests.bench.tiny_bench import tiny_bench


@pytest.mark.e2e
@pytest.mark.slow
def test_bench_end_to_end_joins_every_request(tmp_path: Path) -> None:
    config = tiny_bench(tmp_path, [policy_arm("adaptive"), policy_arm("immediate")], "sdk", sequential=10, ceiling=True)
    out = config.out_dir
    results = run_bench(config)

    # Files.
    stored = json.loads((out / "results.json").read_text())
    assert stored["schema"] == "sift-bench/1"
    report = (out / "report.md").read_text()
    for heading in ("## Arms", "## Validity", "## Summary", "## Targets", "## Throughput ratios",
                    "### sequential", "### burst8", "### closed8", "## In-process ceiling", "## Plots"):  # fmt: skip
        assert heading in report
    for name in ("latency_cdf.png", "forwards_per_burst.png", "throughput.png"):
        assert (out / name).stat().st_size > 1000

    # Structure: one valid run per arm, every phase, every request joined to a forward.
    assert results["orders"] == [["adaptive", "immediate"]]
    assert [r["arm"] for r in results["runs"]] == ["adaptive", "immediate"]
    for run in results["runs"]:
        assert run["valid"], run["problems"]
        assert run["server"]["returncode"] is not None  # stopped
        assert (out / run["trace_file"]).is_file() and (out / run["log_file"]).is_file()
        assert list(run["phases"]) == ["sequential", "burst8", "closed8"]
        assert run["requests"] == run["joined"] > 10 + 16
        assert run["missing"] == []
        for phase in run["phases"].values():
            assert all(phase["ok"]) and all(phase["joined"])
            assert all(f is not None for f in phase["forward_id"])
            assert all(a <= s for a, s in zip(phase["admitted"], phase["start"], strict=True))
            assert all(s <= i <= r for s, i, r in zip(phase["send"], phase["issued"], phase["recv"], strict=True))
        assert len(run["phases"]["sequential"]["request_ids"]) == 10
        bursts = run["phases"]["burst8"]["bursts"]
        assert len(bursts) == 2
        for burst in bursts:
            assert len(burst["ids"]) == 8
            assert sum(burst["pattern"]) == 8 and burst["missing"] == 0
            assert burst["issue_span_ms"] is not None and burst["arrival_span_ms"] is not None
        assert run["phases"]["closed8"]["window_end"] > run["phases"]["closed8"]["window_start"]

    summary = results["analysis"]["summary"]
    for arm in ("adaptive", "immediate"):
        assert summary[arm]["valid_trials"] == 1
        assert summary[arm]["burst8"]["bursts"] == 2
        assert summary[arm]["closed8"]["throughput"]["geomean"] > 0
        assert summary[arm]["sequential"]["queue_ms"]["n"] == 10
        assert {t["status"] for t in results["targets"][arm]} <= {"met", "not met", "n/a"}
    assert [(r["numerator"], r["denominator"], r["n"]) for r in results["analysis"]["ratios"]] == [
        ("adaptive", "immediate", 1)
    ]
    # Each run's closed loop replayed in-process, after its server stopped.
    assert "## In-process replay of the server's batches" in report
    for run in results["runs"]:
        block = run["replay"]["phases"]["closed8"]
        assert block["forwards"] > 0 and block["replay"]["items"] == block["items"] > 0
        assert block["replay"]["items_per_s"] > 0 and block["not_in_trace"] == 0
    assert {arm for arm in results["analysis"]["replay"]} == {"adaptive", "immediate"}
    ceiling = results["ceiling"]
    assert ceiling is not None, results["warnings"]
    assert ceiling["best"]["items_per_s"] > 0
    assert set(results["analysis"]["batch_sizes_seen"]) <= {int(s) for s in ceiling["sizes"]}
