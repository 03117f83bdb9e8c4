"""Faults of the queue itself (issue 35): nats-server restarted under load, and a
worker killed by the kernel's OOM killer in the middle of a forward.

Closed-loop clients (tests/cluster/faults.py) send through the gateway and honour
Retry-After; every request must end answered 200 by its own answer (the X-Request-ID
it sent), none lost. NATS is stopped (SIGTERM, or SIGKILL: no clean shutdown) and
started again on the same port with the same JetStream store, or with an empty one
(a server whose store is lost: the gateway and the workers create the stream, the
consumers and the heartbeat bucket again). The OOM kill is a real one: the worker
runs in a memory cgroup and its forward allocates past the limit."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sift_server.cluster.local import LocalCluster
from sift_server.processes import start_nats
from tests.cluster.conftest import SleeperPaths as Paths
from tests.cluster.conftest import add_worker, metric, sleeper_paths, start_cluster, wait_for, wait_workers
from tests.cluster.faults import ClosedLoop, MemoryCgroup
from tests.cluster.sleeper import write_sleeper_entry

MODEL = "test/faults"  # 50 ms forwards
CLIENTS = 8
OUTAGE_S = 1.5
# A held request is answered within this of NATS being back (reconnects every 0.25 s).
AFTER_RESTART_S = 5.0
# The dead worker's requests come back after the ack wait (3 s) and are answered within this.
ANSWER_WITHIN_S = 5.0
OOM_LIMIT = 512 << 20  # the cage's limit; the caged worker's forward asks for far more


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    return sleeper_paths(tmp_path_factory, "queue-faults", {MODEL: 50})


@pytest.fixture(scope="module")
def cluster(paths: Paths) -> Iterator[LocalCluster]:
    flags = ["--catalog", str(paths.catalog), "--model", MODEL]
    cluster = start_cluster(paths.root / "cluster", 2, [*flags, "--no-calibrate"], flags)
    try:
        yield cluster
    finally:
        cluster.stop()


def restart_nats(cluster: LocalCluster, sig: signal.Signals, store: Path) -> None:
    port = int(cluster.nats_url.rsplit(":", 1)[1])
    cluster.nats.stop(sig)
    time.sleep(OUTAGE_S)
    cluster.nats, _ = start_nats(store, port)


@pytest.mark.parametrize(
    ("sig", "store"), [(signal.SIGTERM, "same"), (signal.SIGKILL, "same"), (signal.SIGTERM, "empty")]
)
def test_nats_restarted_under_load_loses_nothing_and_answers_each_request_once(
    cluster: LocalCluster, sig: signal.Signals, store: str
) -> None:
    load = ClosedLoop(cluster.url, MODEL, CLIENTS)
    load.start()
    try:
        wait_for(lambda: load.answered_since(0.0) >= 20, "answers before the restart", 60)
        folder = cluster.folder if store == "same" else cluster.folder / f"empty-{time.monotonic_ns()}"
        restart_nats(cluster, sig, folder)
        back = time.monotonic()
        wait_for(lambda: load.answered_since(back) >= 50, "answers after the restart", 60)
    finally:
        figures = load.stop()
    print(figures.line())
    assert figures.lost == 0, figures.line()
    assert not figures.bad, figures.bad[:3]
    assert figures.wrong_answers == 0
    # Held through the break, not refused: every request answered soon after NATS is back.
    assert figures.retryable_503 == 0, figures.line()
    assert figures.max_request_s <= OUTAGE_S + AFTER_RESTART_S, figures.line()


@pytest.fixture
def cage() -> Iterator[MemoryCgroup]:
    group = MemoryCgroup.create(f"sift-test-oom-{os.getpid()}", OOM_LIMIT)
    if group is None:
        pytest.skip("no memory cgroup can be created here (needs root and the memory controller)")
    try:
        yield group
    finally:
        group.remove()


def test_a_worker_oom_killed_mid_forward_is_like_kill_9(
    cluster: LocalCluster, paths: Paths, cage: MemoryCgroup
) -> None:
    """The caged worker serves the same model from its own catalog entry, whose forward
    takes 4 GiB: the kernel kills it (SIGKILL) in its first forward. The requests it
    held are redelivered to the other workers and answered once, none refused."""
    hungry = paths.root / "hungry-catalog"
    write_sleeper_entry(hungry, MODEL, 50, marker_dir=paths.markers, alloc_mb=4096)
    victim = add_worker(cluster, "oom-victim", ["--catalog", str(hungry), "--model", MODEL, "--no-calibrate"])
    cage.add(victim.process.pid)
    wait_workers(cluster, MODEL, {"oom-victim"})
    duplicates = metric(cluster.url, "sift_gateway_duplicate_replies_total")
    load = ClosedLoop(cluster.url, MODEL, CLIENTS)
    load.start()
    try:
        wait_for(lambda: not victim.alive(), "the OOM kill", 60)
        killed = time.monotonic()
        time.sleep(ANSWER_WITHIN_S + 1.0)
    finally:
        figures = load.stop()
    print(figures.line())
    assert victim.process.returncode == -signal.SIGKILL
    assert cage.oom_kills() >= 1, "killed by the kernel's OOM killer"
    assert any(p.name.startswith(f"{victim.process.pid}-") for p in paths.markers.glob("*")), "mid-forward"
    assert figures.lost == 0 and not figures.bad and figures.wrong_answers == 0, figures.line()
    assert figures.retryable_503 == 0, figures.line()
    held = [a for a in load.attempts if a.sent < killed < a.answered]
    assert held, "requests were in flight at the kill"
    assert max(a.answered - killed for a in held) <= ANSWER_WITHIN_S
    assert metric(cluster.url, "sift_gateway_duplicate_replies_total") == duplicates  # each run once
