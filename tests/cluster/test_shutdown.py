"""SIGTERM with 32 requests in flight and a forward that outlasts the grace
period: ``sift serve``, ``sift worker`` and ``sift gateway`` each exit within
grace + 0.5 s (the spec; the processes aim at grace + 0.25 s).

The forward sleeps 30 s in the model's executor thread (a thread the
interpreter would wait for at exit), so only the exit watchdog can meet the
bound. Measured from the signal to the process's end as this test sees it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sift_server.cluster.local import LocalCluster
from sift_server.processes import SiftProcess, free_port, spawn, wait_port
from tests.cluster.conftest import LAUNCHER, add_worker, post, sleeper_paths, start_cluster, wait_for, wait_workers
from tests.cluster.conftest import SleeperPaths as Paths

MODEL = "test/stuck"
# The gateway's test serves a model of its own: the worker test leaves its 32 messages in the
# queue, and a worker of the same model would spend its first 30 s on one of them.
GATEWAY_MODEL = "test/stuck-behind-the-gateway"
GRACE_S = 1.0
BOUND_S = GRACE_S + 0.5
IN_FLIGHT = 32


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    return sleeper_paths(tmp_path_factory, "shutdown", {MODEL: 30_000, GATEWAY_MODEL: 30_000})


@pytest.fixture(scope="module")
def cluster(paths: Paths) -> Iterator[LocalCluster]:
    gateway_args = ["--catalog", str(paths.catalog), "--model", MODEL, "--shutdown-grace-s", str(GRACE_S)]
    cluster = start_cluster(paths.root / "cluster", 0, [], gateway_args)
    try:
        yield cluster
    finally:
        cluster.stop()


def model_args(paths: Paths, model: str = MODEL) -> list[str]:
    return ["--catalog", str(paths.catalog), "--model", model, "--no-calibrate", "--shutdown-grace-s", str(GRACE_S)]


def send_in_flight(
    url: str, answers: list[tuple[int, str]] | None = None, model: str = MODEL
) -> list[threading.Thread]:
    """32 requests in threads; their (status, error code) in ``answers`` (0: no answer)."""

    def one(index: int) -> None:
        try:
            response = post(url, model, [f"stuck {index}"], timeout=60)
        except httpx.HTTPError:
            if answers is not None:
                answers.append((0, "no answer"))
            return
        if answers is not None:
            answers.append((response.status_code, response.headers.get("x-sie-error-code", "")))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(IN_FLIGHT)]
    for thread in threads:
        thread.start()
    return threads


def markers(paths: Paths) -> int:
    return len(list(paths.markers.glob("*"))) if paths.markers.exists() else 0


def forward_running(paths: Paths, before: int) -> None:
    wait_for(lambda: markers(paths) > before, "a forward to start", 60)


def exit_seconds(proc: SiftProcess) -> float:
    """SIGTERM, then the seconds until the process is gone."""
    signalled = time.monotonic()
    os.kill(proc.process.pid, signal.SIGTERM)
    try:
        proc.process.wait(timeout=30)
    finally:
        took = time.monotonic() - signalled
        if proc.alive():
            proc.stop(signal.SIGKILL)
    print(f"{proc.name}: exit {took:.2f} s after SIGTERM (grace {GRACE_S:g} s), status {proc.process.returncode}")
    # 0: a drain or the timer's clean exit, not faulthandler's last resort (1).
    assert proc.process.returncode == 0, proc.log_tail()
    return took


def test_sift_serve_exits_within_grace_with_requests_in_flight(paths: Paths, tmp_path: Path) -> None:
    port = free_port()
    serve = spawn("serve", [*LAUNCHER, "serve", "--port", str(port), *model_args(paths)], tmp_path / "serve.log")
    try:
        wait_port(port, serve, 120)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(url + "/readyz").status_code == 200, "serve ready", 120)
        before = markers(paths)
        send_in_flight(url)
        forward_running(paths, before)
        took = exit_seconds(serve)
    finally:
        serve.stop(signal.SIGKILL)
    assert took <= BOUND_S, f"sift serve exited {took:.2f} s after SIGTERM:\n{serve.log_tail()}"


def test_sift_worker_exits_within_grace_with_messages_in_flight(cluster: LocalCluster, paths: Paths) -> None:
    worker = add_worker(cluster, "s-w", model_args(paths))
    try:
        wait_workers(cluster, MODEL, {"s-w"})
        before = markers(paths)
        send_in_flight(cluster.url)
        forward_running(paths, before)
        took = exit_seconds(worker)
    finally:
        worker.stop(signal.SIGKILL)
    assert took <= BOUND_S, f"sift worker exited {took:.2f} s after SIGTERM:\n{worker.log_tail()}"


def test_sift_gateway_exits_within_grace_with_requests_in_flight(cluster: LocalCluster, paths: Paths) -> None:
    worker = add_worker(cluster, "s-g", model_args(paths, GATEWAY_MODEL))
    try:
        wait_workers(cluster, GATEWAY_MODEL, {"s-g"})
        before = markers(paths)
        answers: list[tuple[int, str]] = []
        threads = send_in_flight(cluster.url, answers, GATEWAY_MODEL)
        forward_running(paths, before)
        took = exit_seconds(cluster.gateway)
        for thread in threads:
            thread.join(30)
    finally:
        worker.stop(signal.SIGKILL)
    assert took <= BOUND_S, f"sift gateway exited {took:.2f} s after SIGTERM:\n{cluster.gateway.log_tail()}"
    # Every request in flight is answered, retryably, before the gateway goes.
    assert answers == [(503, "SHUTTING_DOWN")] * IN_FLIGHT
