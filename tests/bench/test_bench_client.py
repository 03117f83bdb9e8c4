from __future__ import annotations

import json
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from sift_bench.client.answer import decode_encode_response, validate_dense
from sift_bench.client.transports import HttpxTransport, SdkTransport, sdk_available
from sift_bench.workload.request import RequestSpec


def nd(array: np.ndarray) -> dict[bytes, object]:
    array = np.ascontiguousarray(array)
    return {b"nd": True, b"type": array.dtype.str, b"kind": b"", b"shape": list(array.shape), b"data": array.tobytes()}


def encode_body(vectors: list[np.ndarray]) -> bytes:
    items = [{"dense": {"dims": int(v.shape[0]), "dtype": "float32", "values": nd(v)}} for v in vectors]
    packed: bytes = msgpack.packb({"model": "m", "items": items}, use_bin_type=True)
    return packed


class FakeServer:
    """Answers encode requests like the server; ``mode`` breaks them on purpose."""

    def __init__(self, mode: str = "ok", dims: int = 4) -> None:
        self.mode = mode
        self.dims = dims
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        body = msgpack.unpackb(request.content, raw=False)
        n = len(body["items"])
        vectors = [np.full(self.dims, 0.5, dtype=np.float32) for _ in range(n)]
        if self.mode == "nan":
            vectors[0][1] = np.nan
        if self.mode == "short":
            vectors = vectors[:-1]
        if self.mode == "status":
            return httpx.Response(500, json={"detail": {"code": "INTERNAL", "message": "boom"}})
        echoed = "wrong" if self.mode == "no-echo" else request.headers.get("x-request-id", "")
        return httpx.Response(
            200,
            content=encode_body(vectors),
            headers={"content-type": "application/msgpack", "x-request-id": echoed},
        )


def test_validate_dense() -> None:
    good = np.ones((2, 4), dtype=np.float32)
    assert validate_dense(good, 2, 4) is None
    assert validate_dense(good, 2, None) is None
    assert "vectors" in (validate_dense(good, 3, 4) or "")
    assert "dims" in (validate_dense(good, 2, 8) or "")
    assert "non-finite" in (validate_dense(np.array([[1.0, np.inf]]), 1, 2) or "")
    assert "float" in (validate_dense(np.ones((1, 4), dtype=np.int8), 1, 4) or "")
    assert "array" in (validate_dense([[1.0]], 1, 1) or "")
    assert "empty" in (validate_dense(np.ones((1, 0), dtype=np.float32), 1, None) or "")


def test_decode_encode_response() -> None:
    vectors = [np.arange(3, dtype=np.float32), np.ones(3, dtype=np.float32)]
    matrix = decode_encode_response(encode_body(vectors), 2)
    assert matrix.shape == (2, 3)
    np.testing.assert_array_equal(matrix[0], vectors[0])
    with pytest.raises(ValueError):
        decode_encode_response(encode_body(vectors), 3)


@pytest.mark.parametrize("kind", ["sdk", "httpx"])
async def test_transport_sends_the_request_id_and_validates(kind: str) -> None:
    assert sdk_available()  # the SDK is a dependency of the bench
    server = FakeServer()
    cls = SdkTransport if kind == "sdk" else HttpxTransport
    transport = cls(
        "http://bench.test", "tiny/embedder", 4, max_connections=4, timeout=5.0,
        http_transport=httpx.MockTransport(server),
    )  # fmt: skip
    try:
        outcome = await transport.send("req-000001", ["hello"])
        assert outcome.ok, outcome.error
        assert outcome.status == 200
        assert outcome.issued is not None
        assert server.seen[-1].headers["x-request-id"] == "req-000001"
        assert server.seen[-1].url.path == "/v1/encode/tiny/embedder"
        for mode, expected in [
            ("nan", "non-finite"),
            ("no-echo", "not echoed"),
            ("short", "item"),
            ("status", "500"),
        ]:
            server.mode = mode
            outcome = await transport.send(f"req-{mode}", ["a", "b"])
            assert not outcome.ok, mode
            assert expected in (outcome.error or ""), (mode, outcome.error)
        server.mode = "ok"
        server.dims = 5
        outcome = await transport.send("req-dims", ["a"])
        assert not outcome.ok and "dims" in (outcome.error or "")
    finally:
        await transport.aclose()


async def test_transport_failure_is_an_outcome_not_an_exception() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = HttpxTransport(
        "http://bench.test", "m", 4, max_connections=1, timeout=1.0, http_transport=httpx.MockTransport(refuse)
    )
    outcome = await transport.send("r", ["x"])
    await transport.aclose()
    assert not outcome.ok
    assert outcome.status is None
    assert "ConnectError" in (outcome.error or "")


def test_json_error_bodies_do_not_crash_decode() -> None:
    with pytest.raises((ValueError, KeyError, TypeError, msgpack.UnpackException)):
        decode_encode_response(json.dumps({"items": []}).encode(), 1)


def _answer(spec: RequestSpec, body: dict[str, Any], keep: int | None) -> dict[str, Any]:
    """A server's answer to ``body``, keeping ``keep`` results (None: all)."""
    n = len(body["items"][:keep])
    if spec.primitive == "score":
        return {"model": "m", "scores": [{"item_id": f"item-{i}", "score": 0.5, "rank": i} for i in range(n)]}
    if spec.primitive == "extract":
        return {"model": "m", "items": [{"id": f"item-{i}", "entities": [], "classifications": []} for i in range(n)]}
    outputs = {
        "dense": {"dims": 4, "dtype": "float32", "values": nd(np.full(4, 0.5, dtype=np.float32))},
        "sparse": {"indices": [1, 5], "values": [0.5, 0.25], "dims": 30522},
        "multivector": {"dims": 4, "dtype": "float32", "values": nd(np.full((3, 4), 0.5, dtype=np.float32))},
    }
    asked = body["params"]["output_types"]
    return {"model": "m", "items": [{output: outputs[output] for output in asked} for _ in range(n)]}


SPECS = [
    RequestSpec("extract", labels=("a", "b")),
    RequestSpec("score", query="q"),
    RequestSpec("encode", output_type="sparse"),
    # BGE-M3's three outputs of one forward in one request (the bge-m3 bench head).
    RequestSpec("encode", more_output_types=("sparse", "multivector")),
]


@pytest.mark.parametrize("kind", ["sdk", "httpx"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
async def test_transport_runs_every_primitive_and_checks_one_result_per_text(kind: str, spec: RequestSpec) -> None:
    seen: list[dict[str, Any]] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = msgpack.unpackb(request.content, raw=False)
        seen.append({"path": request.url.path, "body": body})
        answer = _answer(spec, body, None if len(seen) == 1 else 1)  # the second answer loses a result
        return httpx.Response(
            200,
            content=msgpack.packb(answer, use_bin_type=True),
            headers={"Content-Type": "application/msgpack", "X-Request-ID": request.headers["x-request-id"]},
        )

    cls = SdkTransport if kind == "sdk" else HttpxTransport
    transport = cls(
        "http://bench.test", "tiny/model", None, max_connections=2, timeout=5.0,
        http_transport=httpx.MockTransport(server), spec=spec,
    )  # fmt: skip
    try:
        ok = await transport.send("req-1", ["one", "two"])
        assert ok.ok, ok.error
        assert seen[0]["path"] == f"/v1/{spec.primitive}/tiny/model"
        if spec.primitive == "extract":
            assert seen[0]["body"]["params"]["labels"] == ["a", "b"]
        if spec.primitive == "score":
            assert seen[0]["body"]["query"]["text"] == "q"
        if spec.primitive == "encode":
            assert seen[0]["body"]["params"]["output_types"] == list(spec.output_types)
        short = await transport.send("req-2", ["one", "two"])
        assert not short.ok
    finally:
        await transport.aclose()


@pytest.mark.parametrize("kind", ["sdk", "httpx"])
async def test_an_answer_without_one_of_the_outputs_asked_for_is_invalid(kind: str) -> None:
    spec = RequestSpec("encode", more_output_types=("sparse", "multivector"))

    def server(request: httpx.Request) -> httpx.Response:
        answer = _answer(spec, msgpack.unpackb(request.content, raw=False), None)
        for item in answer["items"]:
            del item["multivector"]
        return httpx.Response(
            200,
            content=msgpack.packb(answer, use_bin_type=True),
            headers={"Content-Type": "application/msgpack", "X-Request-ID": request.headers["x-request-id"]},
        )

    cls = SdkTransport if kind == "sdk" else HttpxTransport
    transport = cls(
        "http://bench.test", "m", None, max_connections=1, timeout=5.0,
        http_transport=httpx.MockTransport(server), spec=spec,
    )  # fmt: skip
    try:
        outcome = await transport.send("req-1", ["one", "two"])
        assert not outcome.ok and "multivector" in (outcome.error or "")
    finally:
        await transport.aclose()


def test_a_spec_survives_its_json_round_trip() -> None:
    import dataclasses

    spec = RequestSpec("encode", more_output_types=("sparse", "multivector"), labels=("a",))
    assert RequestSpec.from_fields(json.loads(json.dumps(dataclasses.asdict(spec)))) == spec
    assert spec.output_types == ("dense", "sparse", "multivector") and not spec.dense_only
    assert RequestSpec().dense_only and not RequestSpec("score").dense_only
    assert spec.body(["x"])["params"] == {"output_types": ["dense", "sparse", "multivector"]}


def test_mixed_workload_spreads_lengths_up_to_the_models_limit() -> None:
    from sift_bench.workload.texts import make_mixed_texts

    texts = make_mixed_texts(400, seed=1)
    words = [len(t.split()) for t in texts]
    assert min(words) >= 5 and max(words) <= 220
    long = [w for w in words if w >= 180]
    assert 5 <= len(long) <= 40  # about one in twenty
    assert make_mixed_texts(400, seed=1) == texts


def test_sentences_workload_has_the_spread_without_passages() -> None:
    from sift_bench.workload.texts import texts_for

    words = [len(t.split()) for t in texts_for("sentences", 400, seed=1)]
    assert min(words) >= 5 and max(words) <= 40
    assert len(set(words)) > 20
