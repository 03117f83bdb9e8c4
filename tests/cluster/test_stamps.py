"""The hop's stamps (--hop-stamps, SIFT_HOP_STAMPS=1) through real processes, and the
benchmark's worker that is also a sift serve (tests/cluster/dual.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sift_server.cluster.hops import STAGES, STAMPS, parse_stamps
from sift_server.cluster.local import LocalCluster
from sift_server.config.settings import variable
from sift_server.processes import free_port, spawn
from tests.cluster.conftest import post, start_cluster, wait_for, wait_workers
from tests.cluster.sleeper import write_sleeper_entry

MODEL = "test/sleeper"
DUAL = [sys.executable, "-m", "tests.cluster.dual"]


@pytest.fixture(scope="module")
def stamped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    root = tmp_path_factory.mktemp("stamps")
    catalog = root / "catalog"
    write_sleeper_entry(catalog, MODEL, 5)
    os.environ[variable("hop_stamps")] = "1"
    try:
        cluster = start_cluster(root / "cluster", 0, [], ["--catalog", str(catalog), "--model", MODEL])
        port = free_port()
        dual = spawn(
            "w-dual",
            [
                *DUAL,
                "--nats-url",
                cluster.nats_url,
                "--worker-id",
                "w-dual",
                "--port",
                str(port),
                "--catalog",
                str(catalog),
                "--model",
                MODEL,
                "--no-calibrate",
            ],
            Path(cluster.folder) / "w-dual.log",
        )
        cluster.workers.append(dual)
    finally:
        os.environ.pop(variable("hop_stamps"), None)
    try:
        wait_workers(cluster, MODEL, {"w-dual"})
        yield cluster, f"http://127.0.0.1:{port}"
    finally:
        cluster.stop()


def test_every_stage_is_stamped_in_order(stamped: tuple[LocalCluster, str]) -> None:
    cluster, _ = stamped
    response = post(cluster.url, MODEL, ["stamp me"])
    assert response.status_code == 200
    stamps = parse_stamps(response.headers[STAMPS])
    critical = [s for s in STAGES if s not in ("g_published", "g_acked")]
    assert set(critical) <= set(stamps), stamps
    times = [stamps[s] for s in critical]
    assert times == sorted(times), stamps
    assert stamps["g_publish"] <= stamps.get("g_acked", stamps["g_publish"])


def test_the_dual_worker_answers_directly_and_through_the_gateway(stamped: tuple[LocalCluster, str]) -> None:
    cluster, direct = stamped

    def direct_ready() -> bool:
        try:
            return post(direct, MODEL, ["direct"], timeout=5).status_code == 200
        except Exception:
            return False

    wait_for(direct_ready, "the dual worker's HTTP port", 60)
    answer = post(direct, MODEL, ["same"])
    through = post(cluster.url, MODEL, ["same"])
    assert answer.status_code == through.status_code == 200
    assert answer.json()["items"] == through.json()["items"]  # the same model; only timings differ
    assert through.headers["x-sift-worker"] == "w-dual"
    assert STAMPS.lower() not in answer.headers  # the direct path is sift serve's, untouched
