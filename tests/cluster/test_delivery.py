"""Delivery semantics with real processes: a worker killed mid-forward, a
request past its deadline, and the drains of a worker and of the gateway."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sift_server.cluster.local import LocalCluster, Proc, free_port, spawn, wait_port
from tests.cluster.conftest import LAUNCHER, add_worker, metric, post, start_cluster, wait_for, wait_workers
from tests.cluster.sleeper import write_sleeper_entry

SLOW = "test/slow"
SLOWER = "test/slower"


class Paths:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog = root / "catalog"
        self.markers = root / "markers"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    paths = Paths(tmp_path_factory.mktemp("delivery"))
    write_sleeper_entry(paths.catalog, SLOW, 1500, marker_dir=paths.markers)
    write_sleeper_entry(paths.catalog, SLOWER, 4000, marker_dir=paths.markers)
    return paths


@pytest.fixture(scope="module")
def cluster(paths: Paths) -> Iterator[LocalCluster]:
    cluster = start_cluster(paths.root / "cluster", 0, [], ["--catalog", str(paths.catalog), "--model", SLOW])
    try:
        yield cluster
    finally:
        cluster.stop()


def worker_args(paths: Paths, *extra: str) -> list[str]:
    # Ack wait 3 s: a dead worker's message comes back within it.
    return [
        "--catalog",
        str(paths.catalog),
        "--model",
        SLOW,
        "--no-calibrate",
        "--ack-wait-s",
        "3",
        "--progress-interval-s",
        "1",
        "--shutdown-grace-s",
        "20",
        *extra,
    ]


def markers(paths: Paths) -> list[str]:
    return sorted(p.name for p in paths.markers.glob("*")) if paths.markers.exists() else []


def request_in_background(url: str, results: list[httpx.Response], text: str = "slow one") -> threading.Thread:
    thread = threading.Thread(target=lambda: results.append(post(url, SLOW, [text], timeout=120)), daemon=True)
    thread.start()
    return thread


def forward_started_on(paths: Paths, before: list[str], workers: list[Proc]) -> Proc:
    """Wait for a new forward marker; the worker whose pid wrote it."""
    wait_for(lambda: len(markers(paths)) > len(before), "a forward to start", 60)
    new = sorted(set(markers(paths)) - set(before))[0]
    pid = int(new.split("-")[0])
    return next(p for p in workers if p.process.pid == pid)


def test_worker_killed_mid_forward_is_redelivered_and_answered_once(cluster: LocalCluster, paths: Paths) -> None:
    a = add_worker(cluster, "k-a", worker_args(paths))
    b = add_worker(cluster, "k-b", worker_args(paths))
    wait_workers(cluster, SLOW, {"k-a", "k-b"})
    before = markers(paths)
    results: list[httpx.Response] = []
    thread = request_in_background(cluster.url, results)
    victim = forward_started_on(paths, before, [a, b])
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait()
    thread.join(120)
    assert len(results) == 1
    response = results[0]
    assert response.status_code == 200, response.text
    survivor = b if victim is a else a
    assert response.headers["x-sift-worker"] == survivor.name
    assert metric(cluster.url, "sift_gateway_duplicate_replies_total") == 0
    survivor.stop()


def test_request_past_its_deadline_is_not_run(cluster: LocalCluster, paths: Paths) -> None:
    # A second gateway whose requests live 2 s; one worker taking one message at a
    # time, whose forward takes 4 s: the second request waits past its deadline.
    port = free_port()
    gateway = spawn(
        "gateway-short",
        [
            *LAUNCHER,
            "gateway",
            "--nats-url",
            cluster.nats_url,
            "--port",
            str(port),
            "--catalog",
            str(paths.catalog),
            "--model",
            SLOW,
            "--request-timeout-s",
            "2",
        ],
        cluster.folder / "gateway-short.log",
    )
    args = [
        "--catalog",
        str(paths.catalog),
        "--model",
        SLOWER,
        "--no-calibrate",
        # Far above the progress interval: a loaded machine delaying a progress
        # message must not make the first forward's message be delivered again.
        "--ack-wait-s",
        "10",
        "--progress-interval-s",
        "1",
        "--max-inflight",
        "1",
    ]
    worker = add_worker(cluster, "d-a", args)
    try:
        wait_port(port, gateway, 120)
        wait_workers(cluster, SLOWER, {"d-a"})
        url = f"http://127.0.0.1:{port}"
        before = markers(paths)
        results: list[httpx.Response] = []
        first = threading.Thread(target=lambda: results.append(post(url, SLOWER, ["first"])), daemon=True)
        first.start()
        wait_for(lambda: len(markers(paths)) > len(before), "the first forward", 60)
        second = threading.Thread(target=lambda: results.append(post(url, SLOWER, ["second"])), daemon=True)
        second.start()
        first.join(60)
        second.join(60)
        # Both timed out at the gateway (the forward takes 4 s)...
        assert sorted(r.status_code for r in results) == [503, 503]
        assert all(r.headers["retry-after"] for r in results)
        # ...and the second, delivered after its deadline, never ran. The worker is still
        # serving: a request through the patient gateway is answered.
        assert post(cluster.url, SLOWER, ["after"]).status_code == 200
        assert len(markers(paths)) == len(before) + 2  # the first and "after", not "second"
    finally:
        gateway.stop()
        worker.stop()


def test_worker_sigterm_finishes_its_message_then_exits(cluster: LocalCluster, paths: Paths) -> None:
    worker = add_worker(cluster, "t-a", worker_args(paths))
    wait_workers(cluster, SLOW, {"t-a"})
    before = markers(paths)
    results: list[httpx.Response] = []
    thread = request_in_background(cluster.url, results)
    forward_started_on(paths, before, [worker])
    worker.process.send_signal(signal.SIGTERM)
    thread.join(120)
    assert results and results[0].status_code == 200
    assert results[0].headers["x-sift-worker"] == "t-a"
    assert worker.process.wait(60) == 0
    # Its heartbeat is gone at once: the gateway knows no worker serves the model.
    wait_for(lambda: post(cluster.url, SLOW, ["x"]).status_code == 503, "the gateway to see no worker", 30)


def test_gateway_sigterm_finishes_in_flight_and_refuses_new(cluster: LocalCluster, paths: Paths) -> None:
    worker = add_worker(cluster, "g-a", worker_args(paths))
    wait_workers(cluster, SLOW, {"g-a"})
    before = markers(paths)
    results: list[httpx.Response] = []
    thread = request_in_background(cluster.url, results)
    forward_started_on(paths, before, [worker])
    cluster.gateway.process.send_signal(signal.SIGTERM)
    try:
        late = post(cluster.url, SLOW, ["late"], timeout=10).status_code
    except httpx.TransportError:
        late = 0  # the listener is closed already
    thread.join(120)
    assert results and results[0].status_code == 200
    assert late in (0, 503)
    assert cluster.gateway.process.wait(60) == 0
    worker.stop()
