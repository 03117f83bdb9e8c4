import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

from sift_bench.simulate import cli
from sift_bench.simulate.metrics import Summary
from sift_bench.simulate.report import (
    MAIN_FIGURE,
    compare,
    summary_table,
    verdict_table,
    verdicts,
    write_json,
)


def summary(
    policy: str,
    kind: str = "bursts",
    *,
    queue_p95: float = 0.002,
    latency_mean: float = 0.010,
    one_forward_share: float = 1.0,
) -> Summary:
    base = Summary(
        policy=policy, family="f", kind=kind, forward="gpu", requests=10,
        queue_p50=0.001, queue_p95=0.002, queue_p99=0.003, queue_mean=0.001,
        latency_mean=0.010, latency_p95=0.012, latency_p50=0.009, latency_p90=0.011, latency_p99=0.013,
        latency_max=0.014,
        throughput=100.0, forwards=5, mean_batch=2.0,
        bursts=5, forwards_per_burst=1.0, one_forward_share=1.0,
    )  # fmt: skip
    return replace(base, queue_p95=queue_p95, latency_mean=latency_mean, one_forward_share=one_forward_share)


def test_bursts_compare_share_first_then_latency() -> None:
    criteria = MAIN_FIGURE["bursts"]
    fused_slow = summary("a", latency_mean=0.020, one_forward_share=1.0)
    split_fast = summary("b", latency_mean=0.005, one_forward_share=0.8)
    assert compare(fused_slow, split_fast, criteria) == -1
    assert compare(summary("a", latency_mean=0.010), summary("b", latency_mean=0.0100001), criteria) == 0
    assert compare(summary("a", latency_mean=0.012), summary("b", latency_mean=0.010), criteria) == 1


def test_verdict_uses_the_better_reference() -> None:
    rows = [
        summary("adaptive", kind="sequential", queue_p95=0.0005),
        summary("timed", kind="sequential", queue_p95=0.003),
        summary("immediate", kind="sequential", queue_p95=0.0001),
    ]
    (verdict,) = verdicts(rows)
    assert verdict.best_reference == "immediate"
    assert not verdict.ok
    assert "LOSES to immediate" in verdict_table([verdict])
    rows[0] = summary("adaptive", kind="sequential", queue_p95=0.0001)
    assert verdicts(rows)[0].ok


def test_verdicts_need_all_three_policies() -> None:
    assert verdicts([summary("adaptive"), summary("timed")]) == []


def test_tables_and_json(tmp_path: Path) -> None:
    rows = [summary(p) for p in ("adaptive", "timed", "immediate")]
    rows[0] = replace(rows[0], forwards_per_burst=math.nan)
    assert "adaptive" in summary_table(rows)
    path = tmp_path / "r.json"
    write_json(path, {"seed": 1}, rows, verdicts(rows))
    data = json.loads(path.read_text())
    assert data["summaries"][0]["forwards_per_burst"] is None
    assert len(data["verdicts"]) == 1


def test_cli_quick_run_writes_results(tmp_path: Path, capsys: object) -> None:
    code = cli.main(["--quick", "--forward", "cpu", "--family", "bursts8-jit0", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert {s["policy"] for s in data["summaries"]} == {
        "adaptive",
        "timed",
        "immediate",
        "adaptive-old",
        "timed-whole",
        "adaptive-split",
        "adaptive-10ms",
        "adaptive-open",
        "ideal",
    }
    assert (tmp_path / "overview.png").stat().st_size > 0
    assert (tmp_path / "main-cpu.png").stat().st_size > 0


def test_cli_registers_a_subcommand(tmp_path: Path) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"batch_seconds": {"1": 0.003, "8": 0.004, "32": 0.008}}))
    parser = argparse.ArgumentParser(prog="sift")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["simulate", "--quick", "--fit", str(fit), "--forward", "gpu", "--policy", "adaptive", "--family", "seq"]
    )
    assert args.handler(args) == 0


def test_closed_loops_are_judged_by_dominance_over_timed() -> None:
    timed = replace(summary("timed", kind="closed"), throughput=100.0)
    immediate = replace(summary("immediate", kind="closed"), throughput=200.0, latency_p50=0.001)
    faster_but_longer_tail = replace(summary("adaptive", kind="closed"), throughput=110.0, latency_p99=0.020)
    (verdict,) = verdicts([faster_but_longer_tail, timed, immediate])
    assert verdict.best_reference == "timed" and not verdict.ok
    assert "p50 and p90 and p99 and max" in verdict.figure
    tighter = replace(faster_but_longer_tail, latency_p99=0.012, latency_max=0.013)
    assert verdicts([tighter, timed, immediate])[0].ok  # immediate's better median does not count
    slower = replace(tighter, throughput=95.0)
    assert not verdicts([slower, timed, immediate])[0].ok
