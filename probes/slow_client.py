"""Slow and abandoning clients, over raw sockets on loopback.

1. A client that sends its body at 1 byte/s gets a 408 (and a closed connection)
   after --body-timeout-s, while other requests are served meanwhile.
2. Clients that hang up mid-body are counted as 499 in /metrics, with one log
   line each and no traceback in the server log.

    .venv/bin/python -m probes.slow_client [--body-timeout-s 3] [--hangups 20]
"""

from __future__ import annotations

import argparse
import re
import socket
import time

import httpx

from probes.common import MINILM, start_server

ENCODE = f"/v1/encode/{MINILM}"


def head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def slow_body(port: int, path: str, budget_s: float) -> tuple[float, bytes]:
    body = b'{"items": [{"text": "' + b"a" * 200 + b'"}]}'
    started = time.perf_counter()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=budget_s) as sock:
        sock.sendall(head(path, len(body)))
        sock.setblocking(False)
        for byte in body:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(1.0)
            try:
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            except OSError:
                break
            if answer or time.perf_counter() - started > budget_s:
                break
    return time.perf_counter() - started, answer


def hang_up(port: int, path: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head(path, 10_000) + b'{"items": [{"text": "half')
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--body-timeout-s", type=float, default=3.0)
    parser.add_argument("--hangups", type=int, default=20)
    args = parser.parse_args()
    failures: list[str] = []
    with start_server("--body-timeout-s", str(args.body_timeout_s)) as server:
        took, answer = slow_body(server.port, ENCODE, args.body_timeout_s + 10)
        status = answer.split(b" ", 2)[1].decode() if answer else "none"
        print(
            f"1 byte/s body on encode: {status} after {took:.1f} s (timeout {args.body_timeout_s} s); "
            f"Connection: close {b'connection: close' in answer.lower()}"
        )
        if status != "408":
            failures.append(f"slow body got {status}")
        took, answer = slow_body(server.port, "/v1/embeddings", args.body_timeout_s + 10)
        status = answer.split(b" ", 2)[1].decode() if answer else "none"
        print(f"1 byte/s body on /v1/embeddings: {status} after {took:.1f} s")
        if status != "408":
            failures.append(f"slow OpenAI body got {status}")
        for _ in range(args.hangups):
            hang_up(server.port, ENCODE)
        time.sleep(1.0)
        metrics = httpx.get(server.url + "/metrics").text
        counted = sum(
            float(m.group(1))
            for m in re.finditer(r'sie_requests_total\{[^}]*endpoint="encode"[^}]*status="499"\} ([0-9.e+]+)', metrics)
        )
        log = server.log_tail(100_000)
        lines = log.count("disconnected mid-body")
        tracebacks = log.count("Traceback")
        print(
            f"{args.hangups} mid-body hang-ups: metrics 499 = {counted:.0f}, log lines {lines}, tracebacks {tracebacks}"
        )
        if counted != args.hangups or lines != args.hangups or tracebacks:
            failures.append("hang-ups not counted once each without traceback")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
