"""/healthz latency while the largest accepted requests are in flight.

Sends, one after the other, the requests the issue found stalling the loop (a
1 MB instruction with 32 items, 16 items of 2 MB, one 1 MB text, an 8 MB model
name in an OpenAI body, 512 long items), while a second connection polls
/healthz every 10 ms from its own process (a thread beside the sender would
share its GIL and count the client's own pauses). Reports the worst and p99
/healthz latency per request.

    .venv/bin/python -m probes.healthz_under_load [--limit-ms 50]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import httpx
import msgspec

from probes.common import MINILM, start_server

MB = 1_000_000
ENCODE = f"/v1/encode/{MINILM}"
JSON = {"Content-Type": "application/json", "Accept": "application/json"}
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/json"}
ITEM_LIMIT = 2 * 1024 * 1024 - 64

HEAVY: list[tuple[str, str, bytes]] = [
    (
        "1 MB instruction, 32 items",
        ENCODE,
        json.dumps({"items": [{"text": "word"}] * 32, "params": {"instruction": "w " * (MB // 2)}}).encode(),
    ),
    ("16 items of 2 MB", ENCODE, json.dumps({"items": [{"text": "word " * (ITEM_LIMIT // 5)}] * 16}).encode()),
    (
        "16 items of 2 MB (msgpack)",
        ENCODE,
        msgspec.msgpack.encode({"items": [{"text": "word " * (ITEM_LIMIT // 5)}] * 16}),
    ),
    (
        "16 items of 1 MB non-ASCII",
        ENCODE,
        json.dumps({"items": [{"text": "wörd " * (ITEM_LIMIT // 6)}] * 16}, ensure_ascii=False).encode(),
    ),
    ("one 1 MB text", ENCODE, json.dumps({"items": [{"text": "word " * (MB // 5)}]}).encode()),
    ("8 MB model name (OpenAI)", "/v1/embeddings", json.dumps({"model": "m" * 8 * MB, "input": "a"}).encode()),
    (
        "OpenAI, 64 inputs of 400 KB",
        "/v1/embeddings",
        json.dumps({"model": MINILM, "input": ["word " * 80_000] * 64}).encode(),
    ),
    ("512 items of 2 KB", ENCODE, json.dumps({"items": [{"text": "word " * 400}] * 512}).encode()),
]


def poll(url: str, ready: Event, stop: Event, out: Connection) -> None:
    """Runs in its own process: sets ``ready`` after its first counted sample, sends its
    samples (ms) back when stopped."""
    samples: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/healthz")  # not counted: the connection and the client's first call
        # The new process's own full collections (its imports) paused it 20-30 ms
        # shortly after it started, before any heavy request was sent.
        gc.collect()
        gc.freeze()
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/healthz")
            samples.append((time.perf_counter() - started) * 1000)
            ready.set()
            time.sleep(0.01)
    out.send(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit-ms", type=float, default=50.0, help="fail when the worst /healthz exceeds this")
    args = parser.parse_args()
    worst_overall = 0.0
    every: list[float] = []
    spawn = multiprocessing.get_context("spawn")
    with start_server() as server, httpx.Client(base_url=server.url, timeout=120) as client:
        client.post(ENCODE, json={"items": [{"text": "warm"}]}, headers=JSON)
        for name, path, body in HEAVY:
            ready, stop = spawn.Event(), spawn.Event()
            receiver, sender = spawn.Pipe(duplex=False)
            poller = spawn.Process(target=poll, args=(server.url, ready, stop, sender))
            poller.start()
            if not ready.wait(60):
                raise RuntimeError("the /healthz poller did not start")
            time.sleep(0.2)
            started = time.perf_counter()
            headers = MSGPACK if "msgpack" in name else JSON
            response = client.post(path, content=body, headers=headers)
            took = time.perf_counter() - started
            time.sleep(0.1)
            stop.set()
            samples: list[float] = receiver.recv()
            poller.join()
            worst = max(samples)
            p99 = statistics.quantiles(samples, n=100)[98] if len(samples) >= 100 else worst
            worst_overall = max(worst_overall, worst)
            every.extend(samples)
            print(
                f"{name:30s} {len(body) / MB:6.1f} MB -> {response.status_code} in {took:6.2f} s; "
                f"/healthz n={len(samples):4d} median {statistics.median(samples):5.1f} ms "
                f"p99 {p99:6.1f} ms max {worst:6.1f} ms"
            )
    p99_all = statistics.quantiles(every, n=100)[98]
    print(
        f"all /healthz n={len(every)} p50 {statistics.median(every):.1f} ms p99 {p99_all:.1f} ms "
        f"max {worst_overall:.1f} ms (limit {args.limit_ms:.0f} ms)"
    )
    return 0 if worst_overall <= args.limit_ms else 1


if __name__ == "__main__":
    raise SystemExit(main())
