"""SIGTERM while a long forward runs: the process must exit within the grace
period plus 0.5 s, and the request in flight gets a 503.

    .venv/bin/python -m probes.shutdown [--grace-s 1] [--items 256]
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

import httpx

from probes.common import MINILM, start_server

ENCODE = f"/v1/encode/{MINILM}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grace-s", type=float, default=1.0)
    parser.add_argument("--items", type=int, default=256, help="items of ~250 tokens in the long request")
    args = parser.parse_args()
    server = start_server("--shutdown-grace-s", str(args.grace_s), "--torch-threads", "1").start()
    outcome: dict[str, object] = {}
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            client.post(ENCODE, json={"items": [{"text": "warm"}]}, headers={"Accept": "application/json"})

            def long_request() -> None:
                body = {"items": [{"text": "lorem ipsum dolor sit amet " * 50}] * args.items}
                try:
                    response = client.post(ENCODE, json=body, headers={"Accept": "application/json"})
                    outcome["status"] = response.status_code
                    outcome["code"] = response.headers.get("X-SIE-Error-Code")
                except httpx.HTTPError as exc:
                    outcome["status"] = type(exc).__name__

            sender = threading.Thread(target=long_request)
            sender.start()
            time.sleep(2.0)  # the forward is running by now
            assert server.process is not None
            signalled = time.perf_counter()
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(timeout=60)
            exit_s = time.perf_counter() - signalled
            sender.join(timeout=30)
    finally:
        server.stop()
    log = server.log_tail(200)
    print(
        f"exit {exit_s:.2f} s after SIGTERM (grace {args.grace_s} s, bound {args.grace_s + 0.5} s); "
        f"return code {server.returncode}; request in flight: {outcome}"
    )
    print("\n".join(line for line in log.splitlines() if "exit" in line or "draining" in line))
    return 0 if exit_s <= args.grace_s + 0.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
