"""What every cluster measurement shares: the processes (a direct sift serve, or
nats-server, a gateway and workers), pinning, readiness, the timing headers."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from sift_bench.client.raw_http import RawResponse
from sift_bench.cluster.sleeper import write_sleeper_entry
from sift_server.processes import SiftProcess, free_port, spawn, start_nats, wait_port

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The sift command with the sleeping test model registered, and a worker that is also a sift serve.
LAUNCHER = [sys.executable, "-m", "sift_bench.cluster.launch"]
DUAL = [sys.executable, "-m", "sift_bench.cluster.dual"]


def live_workers(nats_url: str, model: str) -> set[str]:
    from sift_server.cluster.local import live_workers as live

    return asyncio.run(live(nats_url, model))


def pinned(cpus: str | None, command: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *command] if cpus else command


def wait_ready(url: str, proc: SiftProcess, model: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(proc.log())
        try:
            r = httpx.post(f"{url}/v1/encode/{model}", json={"items": [{"text": "warm"}]}, timeout=30)
            if r.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"not ready: {proc.log()[-2000:]}")


class Setup:
    """Either a direct sift serve or nats + gateway + workers."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[SiftProcess] = []
        self.nats_url = ""
        self.url = ""

    def direct(self, args: list[str], cpus: str | None) -> None:
        port = free_port()
        proc = spawn("serve", pinned(cpus, [*LAUNCHER, "serve", "--port", str(port), *args]), self.folder / "serve.log")
        self.procs.append(proc)
        self.url = f"http://127.0.0.1:{port}"

    def cluster(
        self,
        workers: int,
        worker_args: list[str],
        gateway_args: list[str],
        worker_cpus: str | None,
        gateway_cpus: str | None,
    ) -> None:
        nats_proc, self.nats_url = start_nats(self.folder)
        self.procs.append(nats_proc)
        port = free_port()
        gateway = spawn(
            "gateway",
            pinned(
                gateway_cpus, [*LAUNCHER, "gateway", "--nats-url", self.nats_url, "--port", str(port), *gateway_args]
            ),
            self.folder / "gateway.log",
        )
        self.procs.append(gateway)
        wait_port(port, gateway, 120)  # the gateway creates the stream with its storage
        for i in range(workers):
            self.add_worker(f"w{i}", worker_args, worker_cpus)
        self.url = f"http://127.0.0.1:{port}"

    def add_worker(self, name: str, args: list[str], cpus: str | None) -> SiftProcess:
        proc = spawn(
            name,
            pinned(cpus, [*LAUNCHER, "worker", "--nats-url", self.nats_url, "--worker-id", name, *args]),
            self.folder / f"{name}.log",
        )
        self.procs.append(proc)
        return proc

    def add_dual(self, name: str, args: list[str], cpus: str | None) -> str:
        """A worker that also serves sift serve's HTTP API from the same models
        (tests/cluster/dual.py); its direct URL."""
        port = free_port()
        command = [*DUAL, "--nats-url", self.nats_url, "--worker-id", name, "--port", str(port), *args]
        self.procs.append(spawn(name, pinned(cpus, command), self.folder / f"{name}.log"))
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=30)


def keep_alive(connections: int) -> httpx.Limits:
    """Keep every connection open between requests. httpx keeps 20 by default: with
    more in flight it closes and reopens connections all the time, and a reopened
    one can wait a TCP retransmission before the gateway sees its request."""
    return httpx.Limits(max_connections=connections, max_keepalive_connections=connections)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HOPS = ("x-sift-gateway-time", "x-sift-queue-time", "x-sift-worker-time", "x-total-time")


def hop_figures(rows: list[dict[str, float]]) -> dict[str, float]:
    """p50 of each timing header (ms) over the responses that carried it."""
    out: dict[str, float] = {}
    for name in HOPS:
        values = [r[name] for r in rows if name in r]
        if values:
            out[name.removeprefix("x-").removeprefix("sift-") + "_p50_ms"] = round(statistics.median(values), 3)
    return out


def hops_of(response: httpx.Response | RawResponse) -> dict[str, float]:
    return {name: float(response.headers[name]) for name in HOPS if name in response.headers}


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(procs: list[SiftProcess]) -> dict[str, float]:
    out = {p.name: cpu_seconds(p.process.pid) for p in procs if p.alive()}
    times = os.times()
    out["client"] = times.user + times.system
    return out


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def sleeper_catalog(folder: Path, sleep_ms: float) -> Path:
    catalog = folder / "catalog"
    write_sleeper_entry(catalog, "test/sleeper", sleep_ms)
    return catalog
