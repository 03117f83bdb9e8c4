"""Scale from zero against real processes: a gateway with no worker queues the
requests for its catalog's models (and shows the backlog an autoscaler wakes a
pool on) until a worker starts; unknown models are refused at once; a request
no worker answers in time gets the contract's 503 with Retry-After; ``sift
cluster``-style start-up returns once its workers serve."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import httpx
import pytest

from sift_server.cluster.local import LocalCluster
from sift_server.processes import free_port, spawn, wait_port
from tests.cluster.conftest import (
    LAUNCHER,
    SleeperPaths,
    add_worker,
    consumer_state,
    live_workers,
    post,
    sleeper_paths,
    start_cluster,
    wait_for,
)
from tests.cluster.sleeper import write_sleeper_entry

COLD = "test/cold"
EXPIRING = "test/expiring"
WARM = "test/warm"
SCALED = "test/scaled"
REQUESTS = 16
WARM_LOAD_MS = 4000


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> SleeperPaths:
    paths = sleeper_paths(tmp_path_factory, "cold", {COLD: 50, EXPIRING: 20, SCALED: 50})
    # Its load takes a while: long after the gateway listens.
    write_sleeper_entry(paths.catalog, WARM, 20, load_ms=WARM_LOAD_MS)
    return paths


@pytest.fixture(scope="module")
def cluster(paths: SleeperPaths) -> Iterator[LocalCluster]:
    gateway_args = ["--catalog", str(paths.catalog), "--model", COLD, "--request-timeout-s", "90"]
    cluster = start_cluster(paths.root / "cluster", 0, [], gateway_args)
    try:
        yield cluster
    finally:
        cluster.stop()


def backlog(url: str, gauge: str, model: str) -> float | None:
    """One model's backlog gauge on the gateway's /metrics (None: not shown)."""
    text = httpx.get(url + "/metrics").text
    found = re.search(rf'^sift_gateway_backlog_{gauge}\{{model="{re.escape(model)}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def test_the_gateway_is_ready_and_every_catalog_model_has_its_consumer_before_any_worker(
    cluster: LocalCluster,
) -> None:
    assert httpx.get(cluster.url + "/readyz").status_code == 200
    for model in (COLD, EXPIRING, WARM):
        assert consumer_state(cluster.nats_url, model) == (0, 0)  # exists (it would raise), empty


def test_a_cold_cluster_queues_requests_until_a_worker_starts_and_answers_them_all(
    cluster: LocalCluster, paths: SleeperPaths
) -> None:
    responses: list[httpx.Response] = []
    threads = [
        threading.Thread(target=lambda i=i: responses.append(post(cluster.url, COLD, [f"text {i}"])))
        for i in range(REQUESTS)
    ]
    for thread in threads:
        thread.start()
    # No worker: the requests wait in the stream and the gateway's /metrics shows them.
    wait_for(lambda: backlog(cluster.url, "pending", COLD) == REQUESTS, "the backlog gauge", 60)
    assert responses == []  # none refused
    wait_for(lambda: (backlog(cluster.url, "oldest_age_seconds", COLD) or 0) > 0, "the oldest age", 30)
    assert backlog(cluster.url, "in_flight", COLD) == 0
    add_worker(cluster, "w-cold", ["--catalog", str(paths.catalog), "--model", COLD, "--no-calibrate"])
    for thread in threads:
        thread.join(120)
    assert sorted(r.status_code for r in responses) == [200] * REQUESTS, [r.text for r in responses]
    assert {r.headers["x-sift-worker"] for r in responses} == {"w-cold"}
    wait_for(lambda: backlog(cluster.url, "pending", COLD) == 0, "the backlog to drain", 30)


def test_an_unknown_model_is_refused_at_once(cluster: LocalCluster) -> None:
    # Held, it would outlast this client's timeout (the gateway's is 90 s).
    response = post(cluster.url, "no/such-model", ["x"], timeout=10.0)
    assert response.status_code == 404
    assert response.json()["detail"]["code"] == "MODEL_NOT_FOUND"


def test_a_request_no_worker_answers_in_time_gets_503_with_retry_after(
    cluster: LocalCluster, paths: SleeperPaths
) -> None:
    port = free_port()
    args = ["--catalog", str(paths.catalog), "--model", EXPIRING, "--request-timeout-s", "1"]
    gateway = spawn(
        "gateway-short",
        [*LAUNCHER, "gateway", "--nats-url", cluster.nats_url, "--port", str(port), *args],
        cluster.folder / "gateway-short.log",
    )
    try:
        wait_port(port, gateway, timeout=120)
        response = post(f"http://127.0.0.1:{port}", EXPIRING, ["x"], timeout=30.0)
    finally:
        gateway.stop()
    assert response.status_code == 503, response.text
    assert response.json()["detail"]["code"] == "QUEUE_FULL"
    assert "none is running" in response.json()["detail"]["message"]
    assert response.headers["retry-after"] == "5"  # a pool waking from zero, not a busy one


def test_a_local_cluster_is_ready_once_its_workers_serve(paths: SleeperPaths) -> None:
    worker_args = ["--catalog", str(paths.catalog), "--model", WARM, "--no-calibrate"]
    cluster = start_cluster(paths.root / "warm", 1, worker_args, ["--catalog", str(paths.catalog), "--model", WARM])
    try:
        # Returned with the worker serving (before: as soon as the gateway listened).
        assert live_workers(cluster.nats_url, WARM) == {"w0"}
        response = post(cluster.url, WARM, ["a b"])
        assert response.status_code == 200 and response.headers["x-sift-worker"] == "w0"
    finally:
        cluster.stop()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_local_scaler_wakes_workers_on_backlog_and_retires_them_after_idle(paths: SleeperPaths) -> None:
    from sift_server.cluster.autoscale import LocalScaler
    from sift_server.cluster.scaler import ScalePolicy

    worker_args = ["--catalog", str(paths.catalog), "--model", SCALED, "--no-calibrate"]
    cluster = start_cluster(paths.root / "scaled", 0, worker_args, ["--catalog", str(paths.catalog), "--model", SCALED])
    clock = FakeClock()
    scaler = LocalScaler(cluster, [SCALED], ScalePolicy(0, 2, backlog_per_worker=4, idle_s=30.0), clock)
    try:
        assert scaler.tick() == 0 and cluster.workers == []  # no backlog: nothing runs
        responses: list[httpx.Response] = []
        threads = [
            threading.Thread(target=lambda i=i: responses.append(post(cluster.url, SCALED, [f"t {i}"])))
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        wait_for(lambda: scaler.backlog() == 8, "the backlog", 60)
        assert scaler.tick() == 2 and len(cluster.workers) == 2  # ceil(8 / 4)
        for thread in threads:
            thread.join(120)
        assert sorted(r.status_code for r in responses) == [200] * 8, [r.text for r in responses]
        assert scaler.tick() == 2  # idle for less than idle_s: kept
        clock.now += 30.0
        assert scaler.tick() == 0 and cluster.workers == []
        wait_for(lambda: all(not p.alive() for p in cluster.leaving), "the retired workers to exit", 60)
        # A worker that served drained and exited 0 (one retired while still starting has nothing to drain).
        served = {r.headers["x-sift-worker"] for r in responses}
        assert {p.name: p.process.returncode for p in cluster.leaving if p.name in served} == dict.fromkeys(served, 0)
    finally:
        scaler.close()
        cluster.stop()
