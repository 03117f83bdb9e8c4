"""Delivery semantics with real processes: a worker killed mid-forward, a
request past its deadline, and the drains of a worker and of the gateway."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import nats
import pytest

from sift_server.cluster.codec import WorkRequest, pack_request
from sift_server.cluster.local import LocalCluster
from sift_server.cluster.subjects import (
    DEADLINE_HEADER,
    MSG_ID_HEADER,
    REPLY_HEADER,
    work_subject,
)
from sift_server.processes import SiftProcess, free_port, spawn, wait_port
from tests.cluster.conftest import (
    LAUNCHER,
    add_worker,
    consumer_state,
    metric,
    post,
    sleeper_paths,
    start_cluster,
    wait_for,
    wait_workers,
)
from tests.cluster.conftest import SleeperPaths as Paths

SLOW = "test/slow"
SLOWER = "test/slower"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    return sleeper_paths(tmp_path_factory, "delivery", {SLOW: 1500, SLOWER: 4000})


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


def forward_started_on(paths: Paths, before: list[str], workers: list[SiftProcess]) -> SiftProcess:
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


def publish_expired(nats_url: str, model: str, text: str) -> str:
    """Put a request whose deadline passed a minute ago on the model's queue, as a
    gateway would have (it waits no more); the subject its reply would go to."""
    reply_to = f"_SIFT.test-expired.{uuid.uuid4().hex}"

    async def publish() -> None:
        nc = await nats.connect(nats_url)
        try:
            work = WorkRequest(
                f"/v1/encode/{model}",
                [("content-type", "application/json"), ("accept", "application/json")],
                json.dumps({"items": [{"text": text}]}).encode(),
            )
            headers = {
                MSG_ID_HEADER: uuid.uuid4().hex,
                REPLY_HEADER: reply_to,
                DEADLINE_HEADER: f"{time.time() - 60:.6f}",
            }
            await nc.jetstream().publish(work_subject(model), pack_request(work), headers=headers)
        finally:
            await nc.close()

    asyncio.run(publish())
    return reply_to


def test_request_past_its_deadline_is_not_run(cluster: LocalCluster, paths: Paths) -> None:
    # No clock race: the deadline passed before the message was published. One
    # message at a time, in queue order: once the request published after it is
    # answered, the expired one has been taken (and must have been dropped).
    worker = add_worker(cluster, "d-a", worker_args(paths, "--max-inflight", "1"))
    try:
        wait_workers(cluster, SLOW, {"d-a"})
        before = markers(paths)
        publish_expired(cluster.nats_url, SLOW, "expired")
        after = post(cluster.url, SLOW, ["after"])
        assert after.status_code == 200, after.text
        assert len(markers(paths)) == len(before) + 1  # "after" ran, "expired" did not
        # Terminated, not left for redelivery: nothing waits and nothing is held.
        wait_for(lambda: consumer_state(cluster.nats_url, SLOW) == (0, 0), "the consumer to settle", 30)
    finally:
        worker.stop()


def test_gateway_answers_503_when_no_reply_comes_in_time(cluster: LocalCluster, paths: Paths) -> None:
    # A second gateway whose requests live 1 s, against a forward of 4 s: a slower
    # machine only makes the reply later, so the 503 cannot be missed.
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
            "1",
        ],
        cluster.folder / "gateway-short.log",
    )
    worker = add_worker(cluster, "d-b", [*worker_args(paths), "--model", SLOWER])
    try:
        wait_port(port, gateway, 120)
        wait_workers(cluster, SLOWER, {"d-b"})
        short = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{short}/v1/models/{SLOWER}").json()["loaded"], "the short gateway", 30)
        response = post(short, SLOWER, ["too slow"])
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"]
        assert response.json()["detail"]["code"] == "QUEUE_FULL"
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
