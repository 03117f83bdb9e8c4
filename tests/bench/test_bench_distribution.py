"""``sift bench distribution``: per-trial closed-loop figures and paired ratios, from
synthetic results whose arm ``fast`` runs each forward twice as fast as ``slow``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sift_bench import cli as bench_cli
from sift_bench.report.archive import slim
from sift_bench.report.distribution import closed_loop_table, lines, paired_ratios
from tests.bench.test_bench_report import make_results, make_run


def results() -> dict[str, object]:
    runs = [make_run(arm, trial, speed) for trial in (0, 1) for arm, speed in (("slow", 1.0), ("fast", 2.0))]
    return make_results(runs, ["slow", "fast"])


def test_each_trial_keeps_its_own_figures() -> None:
    table = closed_loop_table(results())
    assert set(table) == {("slow", "closed8"), ("fast", "closed8")}
    slow = table[("slow", "closed8")][0].values
    # Ten forwards of 8 requests, 80 ms each, each request sent 1 ms before its forward and
    # answered 1 ms after it.
    assert slow[1] == pytest.approx(82.0)
    assert slow[5] == 8.0
    assert set(table[("fast", "closed8")]) == {0, 1}


def test_ratios_pair_trials_and_show_the_faster_arm() -> None:
    table = closed_loop_table(results())
    ratios = dict(paired_ratios(table[("fast", "closed8")], table[("slow", "closed8")]))
    assert len(ratios["p50"]) == 2
    assert all(r == pytest.approx(42 / 82, rel=0.02) for r in ratios["p50"])
    assert all(r > 1.8 for r in ratios["items/s"])
    assert ratios["per forward"] == [1.0, 1.0]


def test_lines_divide_by_the_first_arm_unless_told() -> None:
    out = lines(results())
    assert any(line.startswith("closed8   p50") and "fast/slow" in line for line in out)
    assert any("slow/fast" in line for line in lines(results(), base="fast"))


def test_invalid_runs_do_not_count() -> None:
    data = results()
    data["runs"] = [*data["runs"], make_run("fast", 2, 0.1, valid=False)]  # type: ignore[misc]
    assert set(closed_loop_table(data)[("fast", "closed8")]) == {0, 1}


def test_archives_and_unknown_arms_are_refused() -> None:
    data = results()
    with pytest.raises(ValueError, match="no arm 'nope'"):
        lines(data, base="nope")
    from sift_bench.report.analysis import analyze

    data["analysis"] = analyze(data)
    with pytest.raises(ValueError, match="per-request columns"):
        lines(slim(data))


def test_the_subcommand_prints_the_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results()), encoding="utf-8")
    assert bench_cli.run(["distribution", str(path), "--base", "fast"]) == 0
    assert "slow/fast" in capsys.readouterr().out
    assert bench_cli.run(["distribution", str(path), "--base", "nope"]) == 2
    assert "no arm 'nope'" in capsys.readouterr().err
