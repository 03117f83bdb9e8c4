"""The gateway's work routes are sift serve's (api/work.py) with a handler that
publishes: the same body path and decoding (a malformed body, large or small,
never reaches the queue), the same envelopes, and the worker's reply relayed.
No processes: the gateway's NATS side is a fake. The worker calls the serving
core directly (tests/api/test_core_entry.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from sift_server.cluster.codec import WorkReply, WorkRequest
from sift_server.cluster.gateway import create_gateway_app
from sift_server.composition import build_state
from sift_server.config import Settings


class FakeGateway:
    """The NATS side: records what would be published and answers for a worker."""

    stamps = False

    def __init__(self) -> None:
        self.published: list[tuple[str, WorkRequest]] = []

    async def call(self, model: str, work: WorkRequest, stamps: Any = None) -> WorkReply:
        self.published.append((model, work))
        headers = [("content-type", "application/msgpack"), ("content-length", "1"), ("x-sie-served-by", "w1")]
        return WorkReply(200, headers, b"\x80")


@pytest.fixture
async def gateway_client() -> AsyncIterator[tuple[httpx.AsyncClient, FakeGateway, str]]:
    state = build_state(Settings(calibrate=False, max_body_bytes=8 << 20))
    fake = FakeGateway()
    app = create_gateway_app(state, fake)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        yield client, fake, state.settings.default_model


async def test_a_work_post_is_published_and_the_workers_reply_relayed(
    gateway_client: tuple[httpx.AsyncClient, FakeGateway, str],
) -> None:
    client, fake, model = gateway_client
    body = b'{"items": [{"text": "x"}]}'
    response = await client.post(f"/v1/encode/{model}:default", content=body, headers={"X-Request-ID": "r1"})
    assert response.status_code == 200 and response.content == b"\x80"
    assert response.headers["content-type"] == "application/msgpack"
    assert response.headers["x-sie-served-by"] == "w1" and "x-sift-gateway-time" in response.headers
    [(name, work)] = fake.published
    assert name == model and work.path == f"/v1/encode/{model}:default" and bytes(work.body) == body
    assert ("x-request-id", "r1") in work.headers
    openai = await client.post("/v1/embeddings", json={"model": model, "input": "x"})
    assert openai.status_code == 200 and fake.published[1][1].path == "/v1/embeddings"
    # Past 1 MiB the body is read into a memory map and decoded in slices; the queue gets it whole.
    large = msgspec.json.encode({"items": [{"text": "y" * 100}] * 20_000})
    assert (await client.post(f"/v1/encode/{model}", content=large)).status_code == 200
    assert fake.published[2][1].path == f"/v1/encode/{model}" and bytes(fake.published[2][1].body) == large


async def test_malformed_bodies_never_reach_the_queue(
    gateway_client: tuple[httpx.AsyncClient, FakeGateway, str],
) -> None:
    client, fake, model = gateway_client
    bad = await client.post(f"/v1/encode/{model}", content=b"{", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["detail"]["code"] == "INVALID_INPUT"
    # Past 1 MiB the body is decoded in slices (wire/sliced), as sift serve does: an
    # item of the wrong type deep inside is found there.
    items = [{"text": "x" * 100}] * 20_000 + [{"text": 5}]
    large = msgspec.json.encode({"items": items})
    assert len(large) > 2 << 20
    deep = await client.post(f"/v1/encode/{model}", content=large, headers={"Content-Type": "application/json"})
    assert deep.status_code == 400 and "items[20000]" in deep.json()["detail"]["message"]
    openai = await client.post("/v1/embeddings", json={"model": model, "input": "x", "dimensions": "a"})
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "dimensions"
    missing = await client.post("/v1/score/no/such-model", json={"query": {"text": "q"}, "items": [{"text": "x"}]})
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    assert fake.published == []


async def test_other_methods_and_paths_get_the_contracts_envelopes(
    gateway_client: tuple[httpx.AsyncClient, FakeGateway, str],
) -> None:
    client, _, model = gateway_client
    wrong = await client.get(f"/v1/encode/{model}")
    assert wrong.status_code == 405 and wrong.json()["detail"]["code"] == "METHOD_NOT_ALLOWED"
    assert (await client.post("/v1/nope")).json()["detail"]["code"] == "NOT_FOUND"
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/v1/encode/{model}", "/v1/embeddings", "/v1/models"} <= set(paths)
