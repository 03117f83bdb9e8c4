"""Generation through the queue against ``sift serve`` on the same model (issue 33,
item 6): the tiny generator (tests/fixtures/tiny_generator.py) on one worker
behind a gateway and on a direct ``sift serve``; ``--rounds`` streamed
``/v1/completions`` of ``--tokens`` greedy tokens each, the two arms alternating;
prints the median time to the first event and to the end per arm. Then a worker
SIGKILLed in the middle of a stream of the paced twin: prints the time from the
kill to the stream's error event. A measurement: it passes when every answer is
200 and the killed stream ends with the error event."""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.cluster.generation_cluster import SLOW_GENERATOR, WORKER, generation_cluster, generator_catalog
from tests.fixtures.server_process import start_server
from tests.fixtures.tiny_generator import TINY_GENERATOR


def streamed(url: str, tokens: int) -> tuple[float, float, int]:
    """(time to the first event, time to the end, events) of one streamed completion."""
    body = {"model": TINY_GENERATOR, "prompt": "hello world", "max_tokens": tokens, "temperature": 0, "stream": True}
    start = time.perf_counter()
    first, events = 0.0, 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events += 1
                first = first or time.perf_counter() - start
    return first, time.perf_counter() - start, events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sift-gen-cluster-"))
    catalog, _ = generator_catalog(root)
    plain = root / "direct-catalog"  # sift serve knows no test adapter: the generator alone
    plain.mkdir()
    (plain / "generator.yaml").write_text((catalog / "generator.yaml").read_text())
    direct = start_server(["--catalog", str(plain), "--preload", TINY_GENERATOR], root / "serve.log")
    try:
        with generation_cluster(root, catalog) as cluster:
            arms = {"gateway + worker": cluster.url, "sift serve": direct.url}
            for url in arms.values():
                streamed(url, args.tokens)  # warm
            figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in arms}
            for _ in range(args.rounds):
                for name, url in arms.items():
                    figures[name].append(streamed(url, args.tokens))
            for name, runs in figures.items():
                ttfe = statistics.median(r[0] for r in runs) * 1000
                total = statistics.median(r[1] for r in runs) * 1000
                print(
                    f"{name}: {len(runs)} streams of {args.tokens} tokens ({runs[0][2]} events), "
                    f"median first event {ttfe:.1f} ms, median whole stream {total:.1f} ms"
                )
            worker = next(p for p in cluster.workers if p.name == WORKER)
            body = {"prompt": "hello world", "max_new_tokens": 200, "stream": True}
            killed, last = 0.0, ""
            with httpx.stream(
                "POST", f"{cluster.url}/v1/generate/{SLOW_GENERATOR}", json=body, timeout=120
            ) as response:
                seen = 0
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line.startswith("data: {"):
                        last = line
                    seen += 1
                    if seen == 3:
                        worker.process.send_signal(signal.SIGKILL)
                        killed = time.perf_counter()
            ended = time.perf_counter() - killed
            error = json.loads(last[len("data: ") :]).get("error")
            print(f"worker SIGKILLed mid-stream: the stream ended {ended:.2f} s later with {error}")
            return 0 if error is not None else 1
    finally:
        direct.stop()


if __name__ == "__main__":
    raise SystemExit(main())
