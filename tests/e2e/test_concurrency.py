"""Concurrency, auth, back-pressure, disconnects and graceful shutdown against real servers."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from pathlib import Path

import httpx
import msgpack
import numpy as np

from tests.e2e.conftest import DEFAULT_MODEL
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

ENCODE = f"/v1/encode/{DEFAULT_MODEL}"
TINY = f"/v1/encode/{TINY_EMBEDDER}"
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


def forward_records(trace: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]


async def test_32_concurrent_requests_share_forwards_and_get_their_own_vectors(server: ServerProcess) -> None:
    texts = [f"concurrent sentence number {i} about topic {i * 7 % 5}" for i in range(32)]
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        solo = await client.post(
            ENCODE, json={"items": [{"text": t} for t in texts]}, headers={"Accept": "application/json"}
        )
        expected = np.array([item["dense"]["values"] for item in solo.json()["items"]])
        ids = [f"conc-{i}" for i in range(32)]
        responses = await asyncio.gather(
            *(
                client.post(
                    ENCODE, json={"items": [{"text": t}]}, headers={"Accept": "application/json", "X-Request-ID": rid}
                )
                for t, rid in zip(texts, ids, strict=True)
            )
        )
    assert all(r.status_code == 200 for r in responses)
    got = np.array([r.json()["items"][0]["dense"]["values"] for r in responses])
    assert np.allclose(got, expected, atol=1e-5)
    # Counted by the worker: forwards that served these requests.
    trace = server.trace_path  # type: ignore[attr-defined]
    forwards = [r for r in forward_records(trace) if set(r["request_ids"]) & set(ids)]  # type: ignore[arg-type]
    served = sorted(rid for r in forwards for rid in r["request_ids"] if rid in ids)  # type: ignore[union-attr]
    assert served == sorted(ids)
    assert len(forwards) < 32


def test_api_key_is_required_except_on_probes(tiny_server: ServerProcess) -> None:
    body = msgpack.packb({"items": [{"text": "x"}]})
    missing = httpx.post(tiny_server.url + TINY, content=body, headers=MSGPACK)
    assert missing.status_code == 401 and missing.json()["detail"]["code"] == "UNAUTHORIZED"
    wrong = httpx.post(tiny_server.url + TINY, content=body, headers={**MSGPACK, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    models = httpx.get(tiny_server.url + "/v1/models")
    assert models.status_code == 401
    openai = httpx.post(tiny_server.url + "/v1/embeddings", json={"model": TINY_EMBEDDER, "input": "x"})
    assert openai.status_code == 401 and openai.json()["error"]["code"] == "unauthorized"
    ok = httpx.post(tiny_server.url + TINY, content=body, headers={**MSGPACK, "Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    for probe in ("/healthz", "/livez", "/readyz"):
        assert httpx.get(tiny_server.url + probe).status_code == 200


async def test_queue_full_is_503_with_retry_after_and_oversized_request_is_400(tiny_server: ServerProcess) -> None:
    auth = {**MSGPACK, "Authorization": "Bearer s3cret"}
    body = msgpack.packb({"items": [{"text": f"x {i}"} for i in range(4)]})
    async with httpx.AsyncClient(base_url=tiny_server.url, timeout=60) as client:
        responses = await asyncio.gather(*(client.post(TINY, content=body, headers=auth) for _ in range(48)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 503}
        assert 200 in statuses
        full = [r for r in responses if r.status_code == 503]
        assert full, "a queue of 4 items under 48 concurrent 4-item requests must push back"
        for response in full:
            assert response.headers["Retry-After"] == "1"
            assert response.json()["detail"]["code"] == "QUEUE_FULL"
        too_big = await client.post(TINY, content=msgpack.packb({"items": [{"text": "x"}] * 5}), headers=auth)
    assert too_big.status_code == 400 and too_big.json()["detail"]["code"] == "INVALID_INPUT"
    assert "4 or fewer" in too_big.json()["detail"]["message"]


def test_sigterm_drains_admitted_work_then_refuses_and_exits(tmp_path: Path, tiny_catalog: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    proc = start_server(
        [
            "--catalog",
            str(tiny_catalog),
            "--model",
            TINY_EMBEDDER,
            "--shutdown-grace-s",
            "20",
            "--trace-file",
            str(trace),
        ],
        tmp_path / "server.log",
    )
    try:

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=proc.url, timeout=60) as client:
                body = msgpack.packb({"items": [{"text": "drain me " * 20}] * 64})
                inflight = [
                    asyncio.ensure_future(client.post(TINY, content=body, headers={**MSGPACK, "X-Request-ID": f"r{i}"}))
                    for i in range(6)
                ]
                while not trace.exists() or not trace.read_text().strip():
                    await asyncio.sleep(0.01)  # the first forward has run: work is admitted
                proc.process.send_signal(signal.SIGTERM)
                return list(await asyncio.gather(*inflight))

        inflight = asyncio.run(scenario())
        assert proc.process.wait(timeout=60) == 0
        # Every request got an answer: what was admitted ran, the rest was told to retry.
        ran = {rid for record in forward_records(trace) for rid in record["request_ids"]}  # type: ignore[union-attr]
        for i, response in enumerate(inflight):
            if f"r{i}" in ran:
                assert response.status_code == 200
                assert len(msgpack.unpackb(response.content, raw=False)["items"]) == 64
            else:
                assert response.status_code == 503 and response.headers["Retry-After"] == "5"
        assert len(ran) >= 1
    finally:
        proc.stop(signal.SIGKILL)


def queued_items(url: str, model: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("sie_queue_depth{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_client_disconnect_before_forward_drops_the_request(server: ServerProcess) -> None:
    host, port = server.url.removeprefix("http://").split(":")

    def request(rid: str, items: int) -> bytes:
        body = msgpack.packb({"items": [{"text": "abandoned " * 100}] * items})  # 102 tokens an item
        return (
            f"POST {ENCODE} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/msgpack\r\n"
            f"X-Request-ID: {rid}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    # Two blockers of 10,200 tokens each keep the worker busy for two forwards (no two of them fit
    # under the forward cost cap of 16,384 tokens): seconds, against the disconnect watch's 0.05 s.
    blockers = []
    for _ in range(2):
        blockers.append(socket.create_connection((host, int(port))))
        blockers[-1].sendall(request("blocker", 100))
    # More items than both blockers: a queue this deep holds the abandoned request. The client
    # leaves only once it is queued (a close before the server read the body is another path:
    # a 499 mid-body, tests/api).
    sock = socket.create_connection((host, int(port)))
    sock.sendall(request("abandoned-1", 250))
    deadline = time.monotonic() + 60
    while queued_items(server.url, DEFAULT_MODEL) < 250:
        assert time.monotonic() < deadline, "the abandoned request was never queued"
        time.sleep(0.01)
    sock.close()
    after = httpx.post(
        server.url + ENCODE, json={"items": [{"text": "after"}]}, headers={"Accept": "application/json"}, timeout=120
    )
    assert after.status_code == 200
    for blocker in blockers:
        blocker.settimeout(120)
        assert b"200 OK" in blocker.recv(65536)
        blocker.close()
    trace = server.trace_path  # type: ignore[attr-defined]
    ran = {rid for record in forward_records(trace) for rid in record["request_ids"]}  # type: ignore[union-attr]
    assert "abandoned-1" not in ran
    assert "blocker" in ran
