"""Encode latency on the default model while a long generation runs on the same server.

``taskset -c 0 .venv/bin/python bench/tools/encode_during_generation.py OUT [--arm ...]``: per
arm, one ``sift serve`` (``--torch-threads 1``, on the cores the command is pinned to) serving
the default encoder and generation_engines.py's random Qwen2 (~25M parameters, a real decoder's
cost per token); 300 sequential one-sentence encodes alone, then while one stream generates
continuously (a grammar of letters keeps it from ending early; a new one starts when it ends),
then alone again. Each phase also reports the encoder's mean forward time (``/metrics``'
``sift_forward_seconds``), the unit of the bar "during <= alone + one forward".

An arm is ``NAME[,src=PATH][,engine_nice=N]``: ``src`` runs the server from another source
tree (``PYTHONPATH``; e.g. a ``git archive`` of an older commit's ``server/src``, to compare
before and after in one run), ``engine_nice`` sets the generation entry's catalog option.
Arms run in turn, ``--rounds`` times. Prints p50/p90/p99/max per arm and phase and writes
OUT/encode_during_generation.json."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
TEXT = "A short sentence to embed, as a search query would be."


def percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "n": len(ms),
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "max": ordered[-1],
        "mean": statistics.fmean(ms),
    }


def forward_totals(client: httpx.Client, url: str) -> tuple[float, float]:
    """The encoder's (sum of forward seconds, forwards) so far."""
    total, count = 0.0, 0.0
    for line in client.get(f"{url}/metrics").text.splitlines():
        if line.startswith("sift_forward_seconds_") and ENCODER in line:
            name, value = line.rsplit(" ", 1)
            if name.startswith("sift_forward_seconds_sum"):
                total = float(value)
            elif name.startswith("sift_forward_seconds_count"):
                count = float(value)
    return total, count


def phase(client: httpx.Client, url: str, n: int) -> dict[str, float]:
    """``n`` encodes' percentiles and the mean forward time meanwhile."""
    before = forward_totals(client, url)
    result = percentiles(encodes(client, url, n))
    after = forward_totals(client, url)
    result["forward_ms_mean"] = 1000 * (after[0] - before[0]) / max(1.0, after[1] - before[1])
    return result


def encodes(client: httpx.Client, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        answer = client.post(f"{url}/v1/encode/{ENCODER}", json={"items": [{"text": TEXT}]})
        out.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, answer.text
    return out


def generate_forever(url: str, stop: threading.Event, made: list[int]) -> None:
    body = {"prompt": "hello", "max_new_tokens": 900, "grammar": {"regex": "[a-z]{900}"}, "stream": True}
    with httpx.Client(timeout=600) as client:
        while not stop.is_set():
            with client.stream("POST", f"{url}/v1/generate/bench__generator", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        made[0] += 1
                    if stop.is_set():
                        break


def parse_arm(text: str) -> dict[str, str]:
    name, *rest = text.split(",")
    arm = {"name": name}
    for part in rest:
        key, _, value = part.partition("=")
        if key not in ("src", "engine_nice"):
            raise SystemExit(f"unknown arm setting {key!r} in {text!r}")
        arm[key] = value
    return arm


def run_arm(arm: dict[str, str], model: Path, out: Path, n: int) -> dict[str, Any]:
    from tests.fixtures.server_process import start_server
    from tests.fixtures.tiny_generator import catalog_entry

    catalog = out / f"catalog-{arm['name']}"
    catalog.mkdir(exist_ok=True)
    options = f"options:\n  engine_nice: {int(arm['engine_nice'])}\n" if "engine_nice" in arm else ""
    (catalog / "g.yaml").write_text(catalog_entry("bench/generator", model, options))
    serve_args = ["--catalog", str(catalog), "--preload", "bench/generator", "--torch-threads", "1"]
    env = {"PYTHONPATH": arm["src"]} if "src" in arm else None
    server = start_server(serve_args, out / f"server-{arm['name']}.log", env=env)
    report: dict[str, Any] = {"arm": arm}
    try:
        with httpx.Client(timeout=120) as client:
            encodes(client, server.url, 30)  # warm
            report["alone"] = phase(client, server.url, n)
            stop, made = threading.Event(), [0]
            generator = threading.Thread(target=generate_forever, args=(server.url, stop, made), daemon=True)
            generator.start()
            time.sleep(2)
            start = time.perf_counter()
            report["during_generation"] = phase(client, server.url, n)
            report["generation_chunks_per_s"] = made[0] / (time.perf_counter() - start)
            stop.set()
            generator.join(60)
            report["alone_again"] = phase(client, server.url, n)
    finally:
        server.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--arm", action="append", type=parse_arm, help="NAME[,src=PATH][,engine_nice=N]")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from bench.tools.generation_engines import build

    _, ov = build(args.out / "model")
    arms = args.arm or [{"name": "this-tree"}]
    reports = [run_arm(arm, ov, args.out, args.n) for _ in range(args.rounds) for arm in arms]
    (args.out / "encode_during_generation.json").write_text(json.dumps(reports, indent=2))
    for report in reports:
        print(f"arm {report['arm']}: generation meanwhile {report['generation_chunks_per_s']:.1f} chunks/s")
        for key in ("alone", "during_generation", "alone_again"):
            r = report[key]
            print(
                f"  {key:18s} p50 {r['p50']:7.1f}  p90 {r['p90']:7.1f}  p99 {r['p99']:7.1f}  max {r['max']:7.1f} ms"
                f"  (forward {r['forward_ms_mean']:5.1f} ms)"
            )


if __name__ == "__main__":
    main()
