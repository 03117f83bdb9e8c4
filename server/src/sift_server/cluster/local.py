"""A cluster on one machine: a JetStream-enabled nats-server in a temporary
folder, a gateway and workers (``sift cluster``, and the tests), started and
stopped with sift_server.processes.

It is ready when its workers serve, not when the gateway listens: the gateway is
ready as soon as it can accept and queue requests (cluster.md, "Readiness"), which
is what a load balancer needs, while whoever starts a local cluster wants answers.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sift_server.processes import (
    ProcessStartError,
    SiftProcess,
    free_port,
    sift_command,
    spawn,
    start_nats,
    wait_port,
)


async def live_workers(nats_url: str, model: str) -> set[str]:
    """The ids of the workers whose heartbeat for ``model`` is current."""
    import nats
    from nats.js.errors import NoKeysError

    from sift_server.cluster.subjects import HEARTBEAT_BUCKET, model_token

    nc = await nats.connect(nats_url)
    try:
        try:
            kv = await nc.jetstream().key_value(HEARTBEAT_BUCKET)
            keys = await kv.keys()
        except (NoKeysError, nats.js.errors.BucketNotFoundError):
            return set()
        prefix = model_token(model) + "."
        return {k[len(prefix) :] for k in keys if k.startswith(prefix)}
    finally:
        await nc.close()


async def workers_heard(nats_url: str) -> set[str]:
    """The ids of the workers with a current heartbeat for any model (a worker puts
    them once its models are loaded, as it starts pulling)."""
    import nats
    from nats.js.errors import NoKeysError

    from sift_server.cluster.subjects import HEARTBEAT_BUCKET

    nc = await nats.connect(nats_url)
    try:
        try:
            keys = await (await nc.jetstream().key_value(HEARTBEAT_BUCKET)).keys()
        except (NoKeysError, nats.js.errors.BucketNotFoundError):
            return set()
        return {key.split(".", 1)[1] for key in keys if "." in key}
    finally:
        await nc.close()


def wait_workers_serve(nats_url: str, workers: dict[str, SiftProcess], timeout: float) -> None:
    """Until every worker (id -> process) has a heartbeat; a worker that exits meanwhile fails it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in workers.values():
            if not proc.alive():
                raise ProcessStartError(f"{proc.name} exited while loading:\n{proc.log_tail()}")
        if set(workers) <= asyncio.run(workers_heard(nats_url)):
            return
        time.sleep(0.2)
    raise ProcessStartError(f"workers {sorted(workers)} did not serve within {timeout:g}s")


@dataclass
class LocalCluster:
    folder: Path
    nats: SiftProcess
    nats_url: str
    gateway: SiftProcess
    url: str
    workers: list[SiftProcess] = field(default_factory=list)
    # How to start one more worker (the command less its id), for the local scaler.
    worker_command: list[str] = field(default_factory=list)
    # Workers sent SIGTERM by the scaler, draining until they exit.
    leaving: list[SiftProcess] = field(default_factory=list)
    started_workers: int = 0

    def start_worker(self) -> SiftProcess:
        worker_id = f"w{self.started_workers}"
        self.started_workers += 1
        proc = spawn(
            worker_id,
            [*self.worker_command, "--worker-id", worker_id],
            self.folder / f"worker-{worker_id[1:]}.log",
        )
        self.workers.append(proc)
        return proc

    def retire_worker(self) -> SiftProcess:
        """SIGTERM the newest worker: it drains (finishes what it holds) and exits."""
        proc = self.workers.pop()
        if proc.alive():
            proc.process.send_signal(signal.SIGTERM)
        self.leaving.append(proc)
        return proc

    def reap(self) -> None:
        """Forget the workers that exited (drained, or died: the scaler replaces them if needed)."""
        self.workers = [proc for proc in self.workers if proc.alive()]
        self.leaving = [proc for proc in self.leaving if proc.alive()]

    def stop(self) -> None:
        everyone = [self.gateway, *self.workers, *self.leaving]
        for proc in everyone:
            if proc.alive():
                proc.process.send_signal(signal.SIGTERM)
        for proc in everyone:
            proc.stop()
        self.nats.stop()


def start_local_cluster(
    workers: int,
    worker_args: Sequence[str],
    gateway_args: Sequence[str],
    *,
    folder: Path | None = None,
    port: int | None = None,
    launcher: Sequence[str] | None = None,
    load_timeout_s: float = 600.0,
) -> LocalCluster:
    """Start NATS, the gateway and ``workers`` workers; return once the gateway
    listens and every worker serves (its models loaded)."""
    folder = folder or Path(tempfile.mkdtemp(prefix="sift-cluster-"))
    nats_proc, nats_url = start_nats(folder)
    base = sift_command(launcher)
    cluster: LocalCluster | None = None
    try:
        port = port or free_port()
        gateway = spawn(
            "gateway",
            [*base, "gateway", "--nats-url", nats_url, "--port", str(port), *gateway_args],
            folder / "gateway.log",
        )
        cluster = LocalCluster(
            folder,
            nats_proc,
            nats_url,
            gateway,
            f"http://127.0.0.1:{port}",
            worker_command=[*base, "worker", "--nats-url", nats_url, *worker_args],
        )
        for _ in range(workers):
            cluster.start_worker()
        wait_port(port, gateway, timeout=120)
        wait_workers_serve(nats_url, {proc.name: proc for proc in cluster.workers}, load_timeout_s)
        return cluster
    except BaseException:
        for proc in reversed(
            [nats_proc, *(cluster.workers if cluster else []), *([cluster.gateway] if cluster else [])]
        ):
            proc.stop(signal.SIGKILL)
        raise
