"""One ``sift serve`` process per run: a free port, optional CPU pinning with
``taskset``, a trace file, a captured log; stopped (and killed if need be)
whatever happens in between. Started and stopped with sift_server.processes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sift_server.processes import (
    ProcessStartError,
    SiftProcess,
    free_port,
    log_tail,
    offline_env,
    sift_command,
    spawn,
    wait_ready,
)

# Raised when a server exits or is not ready in time while it starts.
ServerStartError = ProcessStartError


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


def add_measurement_args(parser: argparse.ArgumentParser, *, requests: int) -> None:
    """The flags every command that measures a scratch server shares: extra
    catalogs, requests per measurement, the two CPU lists and a JSON copy."""
    parser.add_argument("--catalog", action="append", type=Path, default=[])
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--server-cpus", help="taskset CPU list of the server (default: the first available CPU)")
    parser.add_argument("--client-cpus", help="CPU list of this client (default: the second available CPU)")
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")


def pin_prefix(cpus: set[int] | None) -> list[str]:
    """``taskset -c LIST`` (or nothing when unpinned or taskset is missing)."""
    if cpus is None:
        return []
    taskset = shutil.which("taskset")
    if taskset is None:
        return []
    return [taskset, "-c", ",".join(str(c) for c in sorted(cpus))]


def child_env(pythonpath: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Offline, unbuffered, and the revision's PYTHONPATH (or none of ours)."""
    env = offline_env()
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra or {})
    return env


def run_json_child(
    command: Sequence[str], env: dict[str, str], log_path: Path, timeout_s: float, what: str
) -> dict[str, Any]:
    """Run a measuring child (the ceiling, the replay) with its stderr in ``log_path``;
    its last stdout line is its JSON answer. Raises ``RuntimeError`` naming ``what``,
    with the log's tail, when it fails or answers nothing."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        completed = subprocess.run(
            list(command), stdout=subprocess.PIPE, stderr=log, env=env, timeout=timeout_s, check=False
        )
    lines = completed.stdout.decode(errors="replace").strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"{what} failed ({completed.returncode}):\n" + "\n".join(tail))
    result: dict[str, Any] = json.loads(lines[-1])
    return result


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
    # The artifact cache of Sift's processes (SIFT_CACHE_DIR); None: the user's.
    cache_dir: Path | None = None


def spec_env(spec: ServerSpec) -> dict[str, str]:
    """The environment of a Sift process of ``spec``: ``child_env`` with its cache folder."""
    return child_env(spec.pythonpath, {"SIFT_CACHE_DIR": str(spec.cache_dir)} if spec.cache_dir else None)


@dataclass(slots=True)
class ArmServer:
    """The processes of one arm's run, as the runner drives them: ``primary``
    runs the forwards (its CPU is sampled, its exit code is the run's);
    ``others`` (nats-server, a gateway) start before it and stop after it.
    Subclasses say how they start."""

    spec: ServerSpec
    port: int = 0
    primary: SiftProcess | None = None
    others: list[SiftProcess] = field(default_factory=list)
    startup_s: float = 0.0
    command: list[str] = field(default_factory=list)
    returncode: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.primary.process if self.primary is not None else None

    def start(self) -> Self:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.primary is not None and all(proc.alive() for proc in (self.primary, *self.others))

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (a Sift process drains), then SIGKILL to its process group: the
        primary first, then the others in reverse order of start."""
        if self.primary is not None:
            self.returncode = self.primary.stop(timeout=timeout_s)
        for proc in reversed(self.others):
            proc.stop(timeout=timeout_s)
        return self.returncode

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.spec.log_path, lines)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass(slots=True)
class ServerProcess(ArmServer):
    """One ``sift serve``."""

    def start(self) -> Self:
        spec = self.spec
        self.port = free_port()
        self.command = [
            *pin_prefix(spec.cpus),
            *sift_command(), "serve",
            "--port", str(self.port),
            "--model", spec.model,
            "--policy", spec.policy,
            "--torch-threads", str(spec.torch_threads),
            "--trace-file", str(spec.trace_path),
            "--shutdown-grace-s", "5",
            *[arg for folder in spec.catalogs for arg in ("--catalog", str(folder))],
            *spec.extra_args,
        ]  # fmt: skip
        started = time.perf_counter()
        prepare_logs(spec, self.command)
        # Own session: a Ctrl-C in the terminal reaches us, and we stop the server ourselves.
        self.primary = spawn(
            "sift serve", self.command, spec.log_path, env=spec_env(spec), own_session=True, append=True
        )
        try:
            wait_ready(self.url, [self.primary], spec.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self


def prepare_logs(spec: ServerSpec, command: Sequence[str]) -> None:
    """A fresh log that starts with the command, and no trace of an earlier run."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    spec.log_path.write_text("$ " + " ".join(command) + "\n")
    spec.trace_path.parent.mkdir(parents=True, exist_ok=True)
    spec.trace_path.unlink(missing_ok=True)


@contextlib.contextmanager
def measured_server(model: str, catalogs: Sequence[Path], cpus: set[int] | None) -> Iterator[ServerProcess]:
    """A started ``sift serve`` of ``model`` (adaptive policy, pinned to ``cpus``)
    with its log and trace in a temporary folder; stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = ServerSpec(
            model=model,
            policy="adaptive",
            log_path=Path(tmp) / "server.log",
            trace_path=Path(tmp) / "trace.jsonl",
            catalogs=catalogs,
            cpus=cpus,
        )
        with ServerProcess(spec) as server:
            yield server
