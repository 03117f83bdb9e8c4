"""Every bad input gets the contract's status and code, and disturbs nothing in flight."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import msgpack
import pytest

from tests.e2e.conftest import DEFAULT_MODEL
from tests.fixtures.server_process import ServerProcess

ENCODE = f"/v1/encode/{DEFAULT_MODEL}"
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}

CASES: list[tuple[str, object, int, str]] = [
    ("unknown model", ("/v1/encode/no-such-org/no-such-model", {"items": [{"text": "x"}]}), 404, "MODEL_NOT_FOUND"),
    ("empty model", ("/v1/encode/", {"items": [{"text": "x"}]}), 404, "MODEL_NOT_FOUND"),
    ("missing items", (ENCODE, {}), 400, "INVALID_INPUT"),
    ("empty items", (ENCODE, {"items": []}), 400, "INVALID_INPUT"),
    ("non-string id", (ENCODE, {"items": [{"id": 5, "text": "x"}]}), 400, "INVALID_INPUT"),
    ("text not a string", (ENCODE, {"items": [{"text": 12}]}), 400, "INVALID_INPUT"),
    ("items not a list", (ENCODE, {"items": "x"}), 400, "INVALID_INPUT"),
    ("item without text", (ENCODE, {"items": [{"id": "a"}]}), 400, "INVALID_INPUT"),
    ("params wrong type", (ENCODE, {"items": [{"text": "x"}], "params": []}), 400, "INVALID_INPUT"),
    (
        "unsupported output type",
        (ENCODE, {"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}}),
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown output type",
        (ENCODE, {"items": [{"text": "x"}], "params": {"output_types": ["holo"]}}),
        400,
        "INVALID_INPUT",
    ),
    ("empty output types", (ENCODE, {"items": [{"text": "x"}], "params": {"output_types": []}}), 400, "INVALID_INPUT"),
    (
        "unsupported dtype",
        (ENCODE, {"items": [{"text": "x"}], "params": {"output_dtype": "bfloat16"}}),
        400,
        "INVALID_INPUT",
    ),
    (
        "unknown profile",
        (ENCODE, {"items": [{"text": "x"}], "params": {"options": {"profile": "sparse"}}}),
        400,
        "INVALID_INPUT",
    ),
    # As the reference: a model:profile that is no entry of the catalog is an unknown model.
    ("unknown profile in path", (ENCODE + ":nope", {"items": [{"text": "x"}]}), 404, "MODEL_NOT_FOUND"),
    (
        "bad overflow policy",
        (ENCODE, {"items": [{"text": "x"}], "params": {"options": {"overflow_policy": "cut"}}}),
        400,
        "INVALID_INPUT",
    ),
    (
        "lora on a base model",
        (ENCODE, {"items": [{"text": "x"}], "params": {"options": {"lora": "a"}}}),
        400,
        "INVALID_INPUT",
    ),
    ("text over 2 MiB", (ENCODE, {"items": [{"text": "a" * (2 * 1024 * 1024 + 1)}]}), 400, "INVALID_INPUT"),
    ("too many items", (ENCODE, {"items": [{"text": "x"}] * 513}), 400, "INVALID_INPUT"),
    (
        "input too long with overflow=error",
        (ENCODE, {"items": [{"text": "word " * 600}], "params": {"options": {"overflow_policy": "error"}}}),
        400,
        "INPUT_TOO_LONG",
    ),
    (
        "score on an encode model",
        (f"/v1/score/{DEFAULT_MODEL}", {"query": {"text": "q"}, "items": [{"text": "d"}]}),
        400,
        "INVALID_INPUT",
    ),
    ("extract on an encode model", (f"/v1/extract/{DEFAULT_MODEL}", {"items": [{"text": "d"}]}), 400, "INVALID_INPUT"),
]


@pytest.mark.parametrize(("name", "request_", "status", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_msgpack(
    server: ServerProcess, name: str, request_: tuple[str, object], status: int, code: str
) -> None:
    path, body = request_
    response = httpx.post(server.url + path, content=msgpack.packb(body), headers=MSGPACK, timeout=60)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail["code"] == code
    assert isinstance(detail["message"], str) and len(detail["message"]) > 10
    assert response.headers["content-type"] == "application/json"


def test_same_errors_over_json(server: ServerProcess) -> None:
    response = httpx.post(server.url + ENCODE, json={"items": [{"id": 5, "text": "x"}]})
    assert response.status_code == 400 and response.json()["detail"]["code"] == "INVALID_INPUT"
    assert "id" in response.json()["detail"]["message"]


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"\xc1\xc1\xc1", "application/msgpack"),
        (b"", "application/json"),
        (msgpack.packb([1, 2]), "application/msgpack"),
    ],
)
def test_malformed_bodies(server: ServerProcess, content: bytes, content_type: str) -> None:
    response = httpx.post(server.url + ENCODE, content=content, headers={"Content-Type": content_type})
    assert response.status_code == 400
    assert response.json()["detail"]["code"] == "INVALID_INPUT"


def test_declared_body_over_the_limit_is_413_before_reading_it(server: ServerProcess) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST {ENCODE} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/msgpack\r\n"
        f"Content-Length: {40 * 1024 * 1024}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode())  # the body is never sent: the limit is checked on the header
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] == b"413"
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["detail"]["code"] == "INPUT_TOO_LONG"


def test_streamed_body_over_the_limit_is_413(server: ServerProcess) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(36):
            yield b"x" * (1024 * 1024)

    response = httpx.post(server.url + ENCODE, content=chunks(), headers=MSGPACK, timeout=60)
    assert response.status_code == 413


def test_long_input_is_truncated_by_default(server: ServerProcess) -> None:
    response = httpx.post(
        server.url + ENCODE, json={"items": [{"text": "word " * 600}]}, headers={"Accept": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["usage"]["input_tokens"] == 256


async def test_bad_requests_do_not_disturb_good_ones_in_flight(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        good = [
            client.post(ENCODE, json={"items": [{"text": f"good {i}"}]}, headers={"Accept": "application/json"})
            for i in range(12)
        ]
        bad = [client.post(ENCODE, json={"items": [{"id": i, "text": "bad"}]}) for i in range(12)]
        responses = await asyncio.gather(*[x for pair in zip(good, bad, strict=True) for x in pair])
    good_responses, bad_responses = responses[0::2], responses[1::2]
    assert all(r.status_code == 200 for r in good_responses)
    assert all(len(r.json()["items"][0]["dense"]["values"]) == 384 for r in good_responses)
    assert all(r.status_code == 400 for r in bad_responses)
