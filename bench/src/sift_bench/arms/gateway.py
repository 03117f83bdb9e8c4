"""The server of a *gateway arm*: the same phases through the queue path.

``nats-server`` (JetStream, memory storage, a temporary folder), one ``sift
gateway`` and one ``sift worker``, in place of one ``sift serve``. The worker
runs the arm's policy on the server CPUs and writes the trace the run joins
(the forwards happen there); the gateway and nats-server are left unpinned.
It answers to what the runner asks of a server process: start, url, alive,
stop, the pid whose CPU is sampled (the worker's)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from sift_bench.arms.server import ArmServer, pin_prefix, prepare_logs, spec_env
from sift_server.processes import free_port, nats_command, sift_command, spawn, wait_ready


@dataclass(slots=True)
class ClusterServer(ArmServer):
    """nats-server, a gateway and a worker; the worker is the primary (the
    forwards happen there)."""

    def start(self) -> Self:
        spec = self.spec
        started = time.perf_counter()
        folder = Path(tempfile.mkdtemp(prefix="sift-bench-cluster-"))
        nats_port, self.port = free_port(), free_port()
        nats_url = f"nats://127.0.0.1:{nats_port}"
        models = ["--model", spec.model, *[a for c in spec.catalogs for a in ("--catalog", str(c))]]
        gateway = [
            *sift_command(), "gateway", "--nats-url", nats_url, "--port", str(self.port),
            "--stream-storage", "memory", "--shutdown-grace-s", "5", *models,
        ]  # fmt: skip
        self.command = [
            *pin_prefix(spec.cpus),
            *sift_command(), "worker", "--nats-url", nats_url, "--worker-id", "bench",
            "--policy", spec.policy, "--torch-threads", str(spec.torch_threads),
            "--trace-file", str(spec.trace_path), "--shutdown-grace-s", "5", *models, *spec.extra_args,
        ]  # fmt: skip
        prepare_logs(spec, self.command)
        env = spec_env(spec)
        # All three write to the run's one log.
        for name, command in (("nats-server", nats_command(nats_port, folder)), ("gateway", gateway)):
            self.others.append(spawn(name, command, spec.log_path, env=env, own_session=True, append=True))
        self.primary = spawn("worker", self.command, spec.log_path, env=env, own_session=True, append=True)
        try:
            wait_ready(
                self.url,
                [self.primary, *self.others],
                spec.ready_timeout_s,
                also=lambda: _worker_live(nats_url, spec.model),
                poll_s=0.2,
            )
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self


def _worker_live(nats_url: str, model: str) -> bool:
    """Whether a worker's heartbeat for ``model`` is current."""
    from sift_server.cluster.local import live_workers

    try:
        return bool(asyncio.run(live_workers(nats_url, model)))
    except OSError:
        return False
