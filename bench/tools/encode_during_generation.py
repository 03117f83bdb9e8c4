"""Encode latency on the default model while a long generation runs on the same server.

``taskset -c 0 .venv/bin/python bench/tools/encode_during_generation.py OUT``: one ``sift serve``
(``--torch-threads 1``, on the cores the command is pinned to) serving the default encoder and
generation_engines.py's random Qwen2 (~25M parameters, a real decoder's cost per token); 300
sequential one-sentence encodes alone, then while one stream generates continuously (a grammar
of letters keeps it from ending early; a new one starts when it ends), then alone again. Prints
p50/p90/p99/max per arm and writes OUT/encode_during_generation.json."""

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from bench.tools.generation_engines import build
    from tests.fixtures.server_process import start_server
    from tests.fixtures.tiny_generator import catalog_entry

    _, ov = build(args.out / "model")
    catalog = args.out / "catalog"
    catalog.mkdir(exist_ok=True)
    (catalog / "g.yaml").write_text(catalog_entry("bench/generator", ov))
    serve_args = ["--catalog", str(catalog), "--preload", "bench/generator", "--torch-threads", "1"]
    server = start_server(serve_args, args.out / "server.log")
    report: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=120) as client:
            encodes(client, server.url, 30)  # warm
            report["alone"] = percentiles(encodes(client, server.url, args.n))
            stop, made = threading.Event(), [0]
            generator = threading.Thread(target=generate_forever, args=(server.url, stop, made), daemon=True)
            generator.start()
            time.sleep(2)
            start = time.perf_counter()
            report["during_generation"] = percentiles(encodes(client, server.url, args.n))
            report["generation_chunks_per_s"] = made[0] / (time.perf_counter() - start)
            stop.set()
            generator.join(60)
            report["alone_again"] = percentiles(encodes(client, server.url, args.n))
    finally:
        server.stop()
    (args.out / "encode_during_generation.json").write_text(json.dumps(report, indent=2))
    for arm in ("alone", "during_generation", "alone_again"):
        r = report[arm]
        print(f"{arm:20s} p50 {r['p50']:7.1f}  p90 {r['p90']:7.1f}  p99 {r['p99']:7.1f}  max {r['max']:7.1f} ms")
    print(f"generation while measured: {report['generation_chunks_per_s']:.1f} chunks/s")


if __name__ == "__main__":
    main()
