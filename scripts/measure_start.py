"""Start and memory of ``sift serve`` (issue 36 item 3): each named run starts the
server with the given backend setting and artifact cache, times the start to
``/readyz``, waits until the backend decision (if any) has landed and reads
``VmRSS`` from ``/proc/PID/status`` a fixed time after ready.

    python scripts/measure_start.py --cache /tmp/sift-cache-fresh [--after 20] [--port 8391]

Runs, in order, with ``SIFT_CACHE_DIR`` set to ``--cache`` (use a fresh folder):
auto's first start (deciding in a child), auto's second start (decision
recorded), and the recorded choice named explicitly with ``--backend``.
Prints one JSON line per run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status, body = response.status, response.read()
    except Exception:
        return 0, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def runtime_of(base: str) -> dict[str, Any]:
    _, listing = get(base + "/v1/models")
    models = [m for m in (listing or {}).get("models", []) if m.get("state") == "loaded"]
    return dict(models[0].get("runtime", {})) if models else {}


def run(label: str, port: int, cache: Path, backend: str | None, after: float, settle_s: float) -> dict[str, Any]:
    env = {**os.environ, "SIFT_CACHE_DIR": str(cache), "SIFT_PORT": str(port), "HF_HUB_OFFLINE": "1"}
    env.pop("SIFT_BACKEND", None)
    if backend:
        env["SIFT_BACKEND"] = backend
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "sift_server", "serve"], env=env, stderr=subprocess.DEVNULL)
    try:
        while get(base + "/readyz")[0] != 200:
            if server.poll() is not None:
                raise RuntimeError(f"{label}: the server exited with {server.returncode}")
            time.sleep(0.05)
        ready_s = time.perf_counter() - started
        # A first start: wait for the child's decision to land and the switch.
        deadline = time.perf_counter() + settle_s
        while "pending" in runtime_of(base) and time.perf_counter() < deadline:
            time.sleep(0.5)
        time.sleep(after)
        runtime = runtime_of(base)
        return {
            "run": label,
            "ready_s": round(ready_s, 2),
            "rss_mib": round(rss_mib(server.pid), 1),
            "backend": f"{runtime.get('backend')} {runtime.get('precision')}",
            "selected_by": runtime.get("selected_by"),
            "torch_mapped": "libtorch" in Path(f"/proc/{server.pid}/maps").read_text(),
        }
    finally:
        server.terminate()
        server.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, required=True, help="A fresh artifact cache folder.")
    parser.add_argument("--after", type=float, default=20.0, help="Seconds after ready (and the switch) to read RSS.")
    parser.add_argument("--port", type=int, default=8391)
    parser.add_argument("--settle", type=float, default=600.0, help="Longest wait for a first start's decision.")
    args = parser.parse_args()
    first = run("auto, first start (empty cache)", args.port, args.cache, None, args.after, args.settle)
    print(json.dumps(first), flush=True)
    second = run("auto, second start (decision recorded)", args.port, args.cache, None, args.after, 0)
    print(json.dumps(second), flush=True)
    backend, precision = second["backend"].split()
    named = run(f"--backend {backend}:{precision}", args.port, args.cache, f"{backend}:{precision}", args.after, 0)
    print(json.dumps(named), flush=True)
    print(json.dumps({"rss_ratio_recorded_to_named": round(second["rss_mib"] / named["rss_mib"], 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
