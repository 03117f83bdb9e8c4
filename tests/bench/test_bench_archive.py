"""Archived results: gzipped, per-request columns dropped, the report rebuilt from them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sift_bench.cli import run
from sift_bench.report.archive import is_slim, load_results, slim, write_archive
from sift_bench.run.runner import finish
from tests.bench.test_bench_report import make_results, make_run


def _finished(folder: Path) -> dict[str, object]:
    runs = [make_run("adaptive", 0, 1.0), make_run("timed", 0, 1.0)]
    return finish(make_results(runs, ["adaptive", "timed"]), folder, make_plots=False)


def test_archive_keeps_the_analysis_and_drops_the_columns(tmp_path: Path) -> None:
    results = _finished(tmp_path)
    archived = slim(results)
    assert is_slim(archived) and not is_slim(results)
    assert archived["analysis"] == results["analysis"]
    phase = archived["runs"][0]["phases"]["closed8"]
    assert "send" not in phase and "recv" not in phase
    assert phase["requests"] == len(results["runs"][0]["phases"]["closed8"]["ok"])  # type: ignore[index]
    path = write_archive(results, tmp_path / "results.json.gz")
    assert json.loads(gzip.decompress(path.read_bytes()))["slim"] is True
    assert load_results(path)["analysis"] == json.loads(json.dumps(results["analysis"]))
    with pytest.raises(ValueError, match=r"\.json\.gz"):
        write_archive(results, tmp_path / "results.json")


def test_archive_command_and_report_rebuild(tmp_path: Path) -> None:
    _finished(tmp_path)
    # The report as rebuilt from the stored results (JSON turns tuples into lists).
    assert run(["--report", str(tmp_path / "results.json"), "--no-plots"]) == 0
    before = (tmp_path / "report.md").read_text()
    assert run(["archive", "--remove", str(tmp_path / "results.json")]) == 0
    assert not (tmp_path / "results.json").exists()
    (tmp_path / "report.md").unlink()
    assert run(["--report", str(tmp_path / "results.json.gz"), "--no-plots"]) == 0
    after = (tmp_path / "report.md").read_text()
    assert after.split("## Plots")[0] == before.split("## Plots")[0]
    assert "Archived results" in after
