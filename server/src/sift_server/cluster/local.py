"""A cluster on one machine: a JetStream-enabled nats-server in a temporary
folder, a gateway and workers (``sift cluster``, and the tests), started and
stopped with sift_server.processes."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sift_server.processes import SiftProcess, free_port, sift_command, spawn, start_nats, wait_port


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


@dataclass
class LocalCluster:
    folder: Path
    nats: SiftProcess
    nats_url: str
    gateway: SiftProcess
    url: str
    workers: list[SiftProcess] = field(default_factory=list)

    def stop(self) -> None:
        for proc in [self.gateway, *self.workers]:
            if proc.alive():
                proc.process.send_signal(signal.SIGTERM)
        for proc in [self.gateway, *self.workers]:
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
) -> LocalCluster:
    folder = folder or Path(tempfile.mkdtemp(prefix="sift-cluster-"))
    nats_proc, nats_url = start_nats(folder)
    base = sift_command(launcher)
    started: list[SiftProcess] = [nats_proc]
    try:
        port = port or free_port()
        gateway = spawn(
            "gateway",
            [*base, "gateway", "--nats-url", nats_url, "--port", str(port), *gateway_args],
            folder / "gateway.log",
        )
        started.append(gateway)
        procs = []
        for index in range(workers):
            proc = spawn(
                f"worker-{index}",
                [*base, "worker", "--nats-url", nats_url, "--worker-id", f"w{index}", *worker_args],
                folder / f"worker-{index}.log",
            )
            started.append(proc)
            procs.append(proc)
        wait_port(port, gateway, timeout=120)
        return LocalCluster(folder, nats_proc, nats_url, gateway, f"http://127.0.0.1:{port}", procs)
    except BaseException:
        for proc in reversed(started):
            proc.stop(signal.SIGKILL)
        raise
