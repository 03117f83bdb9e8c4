"""The server of a *gateway arm*: the same phases through the queue path.

``nats-server`` (JetStream, memory storage, a temporary folder), one ``sift
gateway`` and one ``sift worker``, in place of one ``sift serve``. The worker
runs the arm's policy on the server CPUs and writes the trace the run joins
(the forwards happen there); the gateway and nats-server are left unpinned.
It answers to what the runner asks of a server process: start, url, alive,
stop, the pid whose CPU is sampled (the worker's)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sift_bench.server_proc import ServerSpec, ServerStartError, child_env, free_port, log_tail, pin_prefix


@dataclass(slots=True)
class ClusterServer:
    spec: ServerSpec
    port: int = 0
    process: subprocess.Popen[bytes] | None = None  # the worker
    startup_s: float = 0.0
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)  # gateway, nats-server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ClusterServer:
        from sift_server.cluster.local import nats_server_binary

        spec = self.spec
        started = time.perf_counter()
        folder = Path(tempfile.mkdtemp(prefix="sift-bench-cluster-"))
        nats_port, self.port = free_port(), free_port()
        nats_url = f"nats://127.0.0.1:{nats_port}"
        models = ["--model", spec.model, *[a for c in spec.catalogs for a in ("--catalog", str(c))]]
        gateway = [
            sys.executable, "-m", "sift_server", "gateway", "--nats-url", nats_url, "--port", str(self.port),
            "--stream-storage", "memory", "--shutdown-grace-s", "5", *models,
        ]  # fmt: skip
        self.command = [
            *pin_prefix(spec.cpus),
            sys.executable, "-m", "sift_server", "worker", "--nats-url", nats_url, "--worker-id", "bench",
            "--policy", spec.policy, "--torch-threads", str(spec.torch_threads),
            "--trace-file", str(spec.trace_path), "--shutdown-grace-s", "5", *models, *spec.extra_args,
        ]  # fmt: skip
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.trace_path.parent.mkdir(parents=True, exist_ok=True)
        spec.trace_path.unlink(missing_ok=True)
        env = child_env(spec.pythonpath)
        with spec.log_path.open("wb") as log:
            log.write(("$ " + " ".join(self.command) + "\n").encode())
            log.flush()
            nats = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(nats_port), "-js", "-sd", str(folder / "js")]
            for command in (nats, gateway):
                self.others.append(
                    subprocess.Popen(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        start_new_session=True,
                    )
                )
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        try:
            self._wait_ready(started, nats_url)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _wait_ready(self, started: float, nats_url: str) -> None:
        from sift_server.cluster.local import live_workers

        deadline = started + self.spec.ready_timeout_s
        while time.perf_counter() < deadline:
            for proc in (self.process, *self.others):
                if proc is not None and proc.poll() is not None:
                    raise ServerStartError(f"a cluster process exited with {proc.returncode}:\n{self.log_tail()}")
            try:
                ready = httpx.get(self.url + "/readyz", timeout=2.0).status_code == 200
                if ready and asyncio.run(live_workers(nats_url, self.spec.model)):
                    return
            except (httpx.HTTPError, OSError):
                pass
            time.sleep(0.2)
        raise ServerStartError(f"cluster not ready after {self.spec.ready_timeout_s:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return all(p.poll() is None for p in (self.process, *self.others) if p is not None)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """The worker (its return code is the run's), then the gateway, then nats-server."""
        from sift_server.cluster.local import stop_process

        if self.process is not None:
            self.returncode = stop_process(self.process, timeout=timeout_s)
        for proc in reversed(self.others):
            stop_process(proc, timeout=timeout_s)
        return self.returncode

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.spec.log_path, lines)
