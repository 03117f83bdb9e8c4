from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import nats
import pytest

from sift_server.cluster import local
from sift_server.cluster.local import LocalCluster, start_local_cluster
from sift_server.cluster.subjects import STREAM, durable_name
from sift_server.processes import SiftProcess, spawn

LAUNCHER = [sys.executable, "-m", "tests.cluster.launch"]
# The repository root (for tests.*) before the caller's PYTHONPATH, which may put a
# checkout's own sources ahead of the installed ones: the processes run the same code.
_PATH = os.pathsep.join(p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")) if p)
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": _PATH}


def start_cluster(folder: Path, workers: int, worker_args: Sequence[str], gateway_args: Sequence[str]) -> LocalCluster:
    os.environ.update(ENV)
    return start_local_cluster(workers, worker_args, gateway_args, folder=folder, launcher=LAUNCHER)


def add_worker(cluster: LocalCluster, worker_id: str, args: Sequence[str]) -> SiftProcess:
    proc = spawn(
        worker_id,
        [*LAUNCHER, "worker", "--nats-url", cluster.nats_url, "--worker-id", worker_id, *args],
        cluster.folder / f"{worker_id}.log",
    )
    cluster.workers.append(proc)
    return proc


def live_workers(nats_url: str, model: str) -> set[str]:
    return asyncio.run(local.live_workers(nats_url, model))


def wait_for(predicate: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wait_workers(
    cluster: LocalCluster, model: str, ids: set[str], timeout: float = 180.0, headers: dict[str, str] | None = None
) -> None:
    """Until the workers' heartbeats are there and the gateway has seen one of them."""

    def ready() -> bool:
        for proc in cluster.workers:
            if proc.name in ids and not proc.alive():
                raise AssertionError(f"{proc.name} exited:\n{proc.log()}")
        if not ids <= live_workers(cluster.nats_url, model):
            return False
        described = httpx.get(f"{cluster.url}/v1/models/{model}", headers=headers or {}, timeout=30)
        return described.status_code == 200 and described.json()["loaded"] is True

    wait_for(ready, f"workers {ids} for {model}", timeout)


def post(url: str, model: str, texts: Sequence[str], **kwargs: object) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/encode/{model}",
        json={"items": [{"text": t} for t in texts]},
        headers={"Accept": "application/json", **kwargs.pop("headers", {})},  # type: ignore[dict-item]
        timeout=kwargs.pop("timeout", 120.0),  # type: ignore[arg-type]
    )


def metric(url: str, name: str, headers: dict[str, str] | None = None) -> float:
    text = httpx.get(url + "/metrics", headers=headers or {}).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class SleeperPaths:
    """A module's sleeper catalog and the folder its forwards leave markers in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog = root / "catalog"
        self.markers = root / "markers"


def sleeper_paths(factory: pytest.TempPathFactory, name: str, forwards_ms: dict[str, int]) -> SleeperPaths:
    """A catalog of sleeper models (name -> forward milliseconds) in a new folder."""
    from tests.cluster.sleeper import write_sleeper_entry

    paths = SleeperPaths(factory.mktemp(name))
    for model, milliseconds in forwards_ms.items():
        write_sleeper_entry(paths.catalog, model, milliseconds, marker_dir=paths.markers)
    return paths


def consumer_state(nats_url: str, model: str) -> tuple[int, int]:
    """(messages waiting, messages delivered and not yet acknowledged or terminated)."""

    async def read() -> tuple[int, int]:
        nc = await nats.connect(nats_url)
        try:
            info = await nc.jetstream().consumer_info(STREAM, durable_name(model))
            return int(info.num_pending or 0), int(info.num_ack_pending or 0)
        finally:
            await nc.close()

    return asyncio.run(read())
