"""The front door's layers in-process (httpx's ASGI transport, no sockets): each
refusal in its API family's envelope, probes untouched, the ingress ticket."""

from __future__ import annotations

from tests.api.inprocess import MakeClient
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

ENCODE = f"/v1/encode/{TINY_EMBEDDER}"
BODY = {"items": [{"text": "x"}]}


async def test_api_key_refusals_carry_each_familys_envelope(make_client: MakeClient) -> None:
    client, _ = await make_client(api_key="s3cret")
    native = await client.post(ENCODE, json=BODY)
    assert native.status_code == 401
    assert native.headers["WWW-Authenticate"] == "Bearer"
    assert native.headers["X-SIE-Error-Code"] == native.json()["detail"]["code"]
    openai = await client.post("/v1/embeddings", json={"model": TINY_EMBEDDER, "input": "x"})
    assert openai.status_code == 401 and isinstance(openai.json()["error"], dict)
    wrong = await client.post(ENCODE, json=BODY, headers={"Authorization": "Bearer s3cre"})
    assert wrong.status_code == 401
    right = await client.post(ENCODE, json=BODY, headers={"Authorization": "Bearer s3cret"})
    assert right.status_code == 200
    assert (await client.get("/healthz")).status_code == 200  # probes need no key


async def test_declared_size_over_the_limit_is_refused_before_the_body(make_client: MakeClient) -> None:
    client, _ = await make_client(max_body_bytes=1024)
    big = b'{"items": [{"text": "' + b"x" * 2048 + b'"}]}'
    native = await client.post(ENCODE, content=big, headers={"Content-Type": "application/json"})
    assert native.status_code == 413 and native.json()["detail"]["code"] == native.headers["X-SIE-Error-Code"]
    openai = await client.post("/v1/embeddings", content=big, headers={"Content-Type": "application/json"})
    assert openai.status_code == 413 and isinstance(openai.json()["error"], dict)
    small = await client.post(ENCODE, json=BODY)
    assert small.status_code == 200


async def test_a_native_request_is_counted_from_its_headers_to_its_end(make_client: MakeClient) -> None:
    client, state = await make_client()
    assert (await client.post(ENCODE, json=BODY)).status_code == 200  # loaded, so it has a worker
    scheduler = state.registry.records[TINY_EMBEDDER].engine.scheduler  # type: ignore[union-attr]
    ticket = state.registry.begin_ingress(TINY_EMBEDDER)
    assert ticket is not None and scheduler.ingress_pending == 1
    ticket.end()
    ticket.end()  # exactly once
    assert scheduler.ingress_pending == 0
    assert (await client.post(ENCODE, json=BODY)).status_code == 200
    assert scheduler.ingress_pending == 0  # the request's own ticket ended with it
    assert state.registry.begin_ingress("no/such-model") is None
