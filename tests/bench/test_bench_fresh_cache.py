"""``sift bench --fresh-cache``: every Sift server start gets an empty artifact
cache of its own, so each run is a model's first start after install."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_bench.arms.arm import policy_arm
from sift_bench.arms.server import ServerSpec, spec_env
from sift_bench.run.runner import run_bench
from tests.bench.tiny_bench import tiny_bench


def test_the_cache_folder_reaches_the_server_only_when_asked(tmp_path: Path) -> None:
    spec = ServerSpec(model="m", policy="adaptive", log_path=tmp_path / "l", trace_path=tmp_path / "t")
    assert spec_env(spec).get("SIFT_CACHE_DIR") != str(tmp_path / "cache")
    spec.cache_dir = tmp_path / "cache"
    assert spec_env(spec)["SIFT_CACHE_DIR"] == str(tmp_path / "cache")


@pytest.mark.e2e
@pytest.mark.slow
def test_every_start_decides_in_its_own_cache_and_the_cache_is_removed(tmp_path: Path) -> None:
    config = tiny_bench(tmp_path, [policy_arm("adaptive")], "raw", sequential=4)
    config.trials = 2
    config.fresh_cache = True
    results = run_bench(config)

    assert [run["valid"] for run in results["runs"]] == [True, True], [r["problems"] for r in results["runs"]]
    out = config.out_dir
    for run in results["runs"]:
        log = (out / run["log_file"]).read_text()
        # What a start records in the cache (its forward curve, auto's decision) is never
        # found by the next start: the second trial measures again, as the first did.
        assert "forward curve (items/s by batch size)" in log
        assert "recorded earlier" not in log and "(recorded)" not in log
    # One folder per start, each removed once its server stopped.
    assert (out / "caches").is_dir() and not any((out / "caches").iterdir())
    assert results["config"]["fresh_cache"] is True
    assert "artifact cache: empty at every Sift server start" in (out / "report.md").read_text()
