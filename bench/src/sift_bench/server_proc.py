"""One ``sift serve`` process per run: a free port, optional CPU pinning with
``taskset``, a trace file, a captured log; stopped (and killed if need be)
whatever happens in between."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx


class ServerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_cpus(spec: str | None) -> set[int] | None:
    """``"0"``, ``"0,2"``, ``"0-3"`` → a CPU set; None/"" / "none" → no pinning."""
    if spec is None or spec.strip().lower() in ("", "none"):
        return None
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.update(range(int(low), int(high) + 1))
        elif part:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"no CPUs in {spec!r}")
    return cpus


def default_cpus(server: str | None, client: str | None) -> tuple[set[int] | None, set[int] | None]:
    """Explicit CPU lists, or by default the first available CPU for the server
    and the second for the load generator (no pinning on a single CPU)."""
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned = len(available) >= 2
    server_cpus = parse_cpus(server) if server is not None else ({available[0]} if pinned else None)
    client_cpus = parse_cpus(client) if client is not None else ({available[1]} if pinned else None)
    return server_cpus, client_cpus


def pin_prefix(cpus: set[int] | None) -> list[str]:
    """``taskset -c LIST`` (or nothing when unpinned or taskset is missing)."""
    if cpus is None:
        return []
    taskset = shutil.which("taskset")
    if taskset is None:
        return []
    return [taskset, "-c", ",".join(str(c) for c in sorted(cpus))]


def child_env(pythonpath: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra or {})
    return env


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a server's log ("" while there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True)
class ServerSpec:
    model: str
    policy: str
    log_path: Path
    trace_path: Path
    catalogs: Sequence[Path] = ()
    torch_threads: int = 1
    cpus: set[int] | None = None
    pythonpath: Path | None = None
    ready_timeout_s: float = 300.0
    extra_args: Sequence[str] = ()


@dataclass(slots=True)
class ServerProcess:
    spec: ServerSpec
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    startup_s: float = 0.0
    command: list[str] = field(default_factory=list)
    returncode: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        spec = self.spec
        self.port = free_port()
        self.command = [
            *pin_prefix(spec.cpus),
            sys.executable, "-m", "sift_server", "serve",
            "--port", str(self.port),
            "--model", spec.model,
            "--policy", spec.policy,
            "--torch-threads", str(spec.torch_threads),
            "--trace-file", str(spec.trace_path),
            "--shutdown-grace-s", "5",
            *[arg for folder in spec.catalogs for arg in ("--catalog", str(folder))],
            *spec.extra_args,
        ]  # fmt: skip
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.trace_path.parent.mkdir(parents=True, exist_ok=True)
        spec.trace_path.unlink(missing_ok=True)
        started = time.perf_counter()
        with spec.log_path.open("wb") as log:
            log.write(("$ " + " ".join(self.command) + "\n").encode())
            log.flush()
            # Own session: a Ctrl-C in the terminal reaches us, and we stop the server ourselves.
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env(spec.pythonpath),
                start_new_session=True,
            )
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _wait_ready(self, started: float) -> None:
        assert self.process is not None
        deadline = started + self.spec.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.perf_counter() < deadline:
                if self.process.poll() is not None:
                    raise ServerStartError(
                        f"server exited with status {self.process.returncode} before ready:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.url + "/readyz").status_code == 200:
                        return
                time.sleep(0.1)
        raise ServerStartError(f"server not ready after {self.spec.ready_timeout_s:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (the server drains), then SIGKILL to its process group."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout_s)
        if process.poll() is None:
            # Still there after the grace: kill its whole session (it runs in one of its own).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.returncode = process.returncode
        return self.returncode

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.spec.log_path, lines)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
