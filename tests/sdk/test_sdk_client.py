"""The synchronous client against a scripted fake server (httpx.MockTransport)."""

from __future__ import annotations

from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from sift_sdk import (
    AuthenticationError,
    Classification,
    DetectedObject,
    Entity,
    ExtractResult,
    InputTooLongError,
    ItemError,
    MalformedResponseError,
    ModelLoadFailedError,
    ModelLoadingError,
    ModelNotFoundError,
    QueueFullError,
    Relation,
    RequestError,
    ScoreEntry,
    ScoreResult,
    ServerError,
    SiftClient,
    SiftConnectionError,
    SiftTimeoutError,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
VECS = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -0.125]], dtype=np.float32)


# ---------------------------------------------------------------- encode: bodies and results


def test_encode_list_of_strings(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS))
    out = client.encode(MODEL, ["first", "second"])
    assert server.body() == {"items": [{"text": "first"}, {"text": "second"}]}
    assert isinstance(out, np.ndarray)
    assert out.shape == (2, 3)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, VECS)


def test_encode_single_string_returns_1d(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    out = client.encode(MODEL, "only")
    assert server.body() == {"items": [{"text": "only"}]}
    assert out.shape == (3,)
    np.testing.assert_array_equal(out, VECS[0])


def test_encode_single_dict_item(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1], ids=["a"]))
    out = client.encode(MODEL, {"id": "a", "text": "x", "metadata": {"lang": "en"}})
    assert server.body() == {"items": [{"id": "a", "text": "x", "metadata": {"lang": "en"}}]}
    assert out.shape == (3,)


def test_encode_all_params(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS))
    client.encode(
        MODEL,
        [{"id": "a", "text": "x"}, "y"],
        output_dtype="float16",
        output_types=["dense"],
        is_query=True,
        instruction="Represent the query",
        options={"profile": "default", "is_query": False},
    )
    assert server.body() == {
        "items": [{"id": "a", "text": "x"}, {"text": "y"}],
        "params": {
            "output_types": ["dense"],
            "instruction": "Represent the query",
            "output_dtype": "float16",
            "options": {"profile": "default", "is_query": True},
        },
    }


def test_encode_is_query_false_is_sent(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    client.encode(MODEL, "x", is_query=False)
    assert server.body() == {
        "items": [{"text": "x"}],
        "params": {"options": {"is_query": False}},
    }


def test_encode_binary_media_is_bin(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    client.encode(MODEL, {"images": [{"data": b"\xff\xd8\xff", "format": "jpeg"}]})
    raw = msgpack.unpackb(server.requests[-1].content, raw=True)
    assert raw[b"items"][0][b"images"][0][b"data"] == b"\xff\xd8\xff"
    # bin stays bytes with raw=False; a str would have been decoded to str
    assert server.body()["items"][0]["images"][0]["data"] == b"\xff\xd8\xff"


def test_encode_does_not_mutate_caller_items(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    item = {"text": "x"}
    options = {"profile": "p"}
    client.encode(MODEL, [item], is_query=True, options=options)
    assert item == {"text": "x"}
    assert options == {"profile": "p"}


@pytest.mark.parametrize(
    ("dtype", "label"),
    [(np.float16, "float16"), (np.int8, "int8"), (np.uint8, "binary")],
)
def test_encode_keeps_the_returned_dtype(
    client: SiftClient, server: Any, wire: Any, nd_map: Any, dtype: Any, label: str
) -> None:
    vectors = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=dtype)
    items = [{"dense": {"dims": 4, "dtype": label, "values": nd_map(v)}} for v in vectors]
    server.reply(wire.msgpack({"model": MODEL, "items": items, "timing": {}}))
    out = client.encode(MODEL, ["a", "b"], output_dtype=label)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, vectors)


def test_encode_full_parses_every_output(client: SiftClient, server: Any, wire: Any, nd_map: Any) -> None:
    dense = np.array([0.1, 0.2], dtype=np.float32)
    indices = np.array([3, 17], dtype=np.int32)
    sparse_values = np.array([0.9, 0.4], dtype=np.float32)
    multi = np.arange(6, dtype=np.float32).reshape(3, 2)
    body = {
        "model": MODEL,
        "items": [
            {
                "id": "a",
                "dense": {"dims": 2, "dtype": "float32", "values": nd_map(dense)},
                "sparse": {
                    "dims": 30522,
                    "dtype": "float32",
                    "indices": nd_map(indices),
                    "values": nd_map(sparse_values),
                },
                "multivector": {
                    "token_dims": 2,
                    "num_tokens": 3,
                    "dtype": "float32",
                    "values": nd_map(multi),
                },
            },
            {"dense": {"dims": 2, "dtype": "float32", "values": nd_map(dense * 2)}},
        ],
        "timing": {
            "total_ms": 3.0,
            "queue_ms": 1.0,
            "tokenization_ms": 0.5,
            "inference_ms": 1.5,
            "postprocessing_ms": None,
        },
        "usage": {"input_tokens": 9},
    }
    server.reply(wire.msgpack(body))
    result = client.encode_full(
        MODEL,
        [{"id": "a", "text": "x"}, "y"],
        output_types=["dense", "sparse", "multivector"],
    )
    assert server.body()["params"] == {"output_types": ["dense", "sparse", "multivector"]}
    assert result.model == MODEL
    assert result.timing is not None and result.timing["total_ms"] == 3.0
    assert result.timing["postprocessing_ms"] is None
    assert result.usage == {"input_tokens": 9}
    first, second = result.items
    assert first["id"] == "a"
    assert "id" not in second
    np.testing.assert_array_equal(first["dense"], dense)
    np.testing.assert_array_equal(first["sparse"]["indices"], indices)
    np.testing.assert_array_equal(first["sparse"]["values"], sparse_values)
    assert first["multivector"].shape == (3, 2)
    np.testing.assert_array_equal(second["dense"], dense * 2)
    assert set(second) == {"dense"}


def test_encode_rejects_output_types_without_dense(client: SiftClient, server: Any) -> None:
    with pytest.raises(ValueError, match="encode_full"):
        client.encode(MODEL, "x", output_types=["sparse"])
    assert server.requests == []


def test_encode_item_count_mismatch_is_malformed(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    with pytest.raises(MalformedResponseError, match="1 items for 2 inputs"):
        client.encode(MODEL, ["a", "b"])


def test_encode_plain_list_values_are_malformed_in_msgpack(client: SiftClient, server: Any, wire: Any) -> None:
    body = {
        "model": MODEL,
        "items": [{"dense": {"dims": 2, "values": {"not": "an array"}}}],
    }
    server.reply(wire.msgpack(body))
    with pytest.raises(MalformedResponseError):
        client.encode(MODEL, "a")


def test_non_msgpack_success_body_is_malformed(client: SiftClient, server: Any) -> None:
    server.reply(httpx.Response(200, content=b"\xc1garbage"))
    with pytest.raises(MalformedResponseError) as info:
        client.encode(MODEL, "a")
    assert info.value.status_code == 200


def test_bad_item_type_is_a_type_error(client: SiftClient) -> None:
    with pytest.raises(TypeError):
        client.encode(MODEL, [42])  # type: ignore[list-item]


# ---------------------------------------------------------------- headers and paths


def test_headers_for_core_routes(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    request = server.requests[-1]
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/msgpack"
    assert request.headers["accept"] == "application/msgpack"
    assert "authorization" not in request.headers


def test_slash_and_profile_in_model_path_are_not_encoded(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS[:1]))
    client.encode("BAAI/bge-m3:sparse", "x")
    assert server.paths == ["/v1/encode/BAAI/bge-m3:sparse"]
    assert str(server.requests[-1].url) == "http://sift.test:8080/v1/encode/BAAI/bge-m3:sparse"


def test_all_paths(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(
        wire.encode(VECS[:1]),
        wire.msgpack({"model": MODEL, "query_id": None, "scores": []}),
        wire.msgpack({"model": MODEL, "items": [{"id": "item-0"}]}),
        wire.json({"models": []}),
        wire.json({"name": MODEL}),
    )
    client.encode(MODEL, "x")
    client.score(MODEL, "q", ["d"])
    client.extract(MODEL, "t")
    client.models()
    client.model(MODEL)
    assert server.paths == [
        f"/v1/encode/{MODEL}",
        f"/v1/score/{MODEL}",
        f"/v1/extract/{MODEL}",
        "/v1/models",
        f"/v1/models/{MODEL}",
    ]


def test_empty_model_id_is_rejected_locally(client: SiftClient, server: Any) -> None:
    with pytest.raises(ValueError):
        client.encode("", "x")
    assert server.requests == []


def test_authorization_header_from_argument(make_client: Any, server: Any, wire: Any) -> None:
    client = make_client(api_key="s3cret")
    server.reply(wire.encode(VECS[:1]), wire.json({"models": []}))
    client.encode(MODEL, "x")
    client.models()
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer s3cret"] * 2


def test_authorization_header_from_env(
    make_client: Any, server: Any, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIFT_API_KEY", "from-env")
    client = make_client()
    server.reply(wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    assert server.requests[-1].headers["authorization"] == "Bearer from-env"


def test_base_url_trailing_slash_and_prefix(server: Any, wire: Any) -> None:
    http = httpx.Client(transport=httpx.MockTransport(server.handler))
    with SiftClient("http://gw.test/sift/", http_client=http) as client:
        server.reply(wire.encode(VECS[:1]))
        client.encode("a/b", "x")
    assert str(server.requests[-1].url) == "http://gw.test/sift/v1/encode/a/b"


def test_base_url_must_be_absolute() -> None:
    with pytest.raises(ValueError):
        SiftClient("localhost:8080")


# ---------------------------------------------------------------- score


def test_score_body_and_result(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(
        wire.msgpack(
            {
                "model": MODEL,
                "query_id": "q1",
                "scores": [
                    {"item_id": "d1", "score": 7.31, "rank": 0},
                    {"item_id": "item-1", "score": -4.02, "rank": 1},
                ],
                "usage": {"input_tokens": 58},
            }
        )
    )
    result = client.score(
        MODEL,
        {"id": "q1", "text": "what is a vector database?"},
        [
            {"id": "d1", "text": "A vector database stores embeddings."},
            "Bananas are yellow.",
        ],
        instruction="Given a query",
        options={"profile": "default"},
    )
    assert server.body() == {
        "query": {"id": "q1", "text": "what is a vector database?"},
        "items": [
            {"id": "d1", "text": "A vector database stores embeddings."},
            {"text": "Bananas are yellow."},
        ],
        "instruction": "Given a query",
        "options": {"profile": "default"},
    }
    assert result == ScoreResult(
        model=MODEL,
        query_id="q1",
        scores=[ScoreEntry("d1", 7.31, 0), ScoreEntry("item-1", -4.02, 1)],
        usage={"input_tokens": 58},
    )


def test_score_minimal_body(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(
        wire.msgpack(
            {
                "model": MODEL,
                "query_id": None,
                "scores": [{"item_id": "item-0", "score": 1, "rank": 0}],
            }
        )
    )
    result = client.score(MODEL, "q", "d")
    assert server.body() == {"query": {"text": "q"}, "items": [{"text": "d"}]}
    assert result.query_id is None
    assert result.usage is None
    assert result.scores == [ScoreEntry("item-0", 1.0, 0)]
    assert isinstance(result.scores[0].score, float)


def test_score_missing_rank_is_malformed(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.msgpack({"model": MODEL, "scores": [{"item_id": "a", "score": 1.0}]}))
    with pytest.raises(MalformedResponseError, match="rank"):
        client.score(MODEL, "q", ["d"])


# ---------------------------------------------------------------- extract

NER_ITEM = {
    "id": "n1",
    "entities": [
        {
            "text": "Ada Lovelace",
            "label": "person",
            "score": 0.97,
            "start": 0,
            "end": 12,
            "bbox": None,
        },
        {
            "text": "London",
            "label": "location",
            "score": 0.91,
            "start": 44,
            "end": 50,
            "bbox": None,
        },
    ],
    "relations": [{"head": "Ada Lovelace", "tail": "London", "relation": "lives_in", "score": 0.5}],
    "classifications": [{"label": "bio", "score": 0.8}],
    "objects": [{"label": "face", "score": 0.7, "bbox": [1, 2, 3, 4]}],
    "data": {"k": "v"},
}


def test_extract_body_and_single_result(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.msgpack({"model": MODEL, "items": [NER_ITEM]}))
    result = client.extract(
        MODEL,
        {"id": "n1", "text": "Ada Lovelace worked with Charles Babbage in London."},
        labels=["person", "location"],
        output_schema={"type": "object"},
        instruction="find people",
        options={"threshold": 0.4},
    )
    assert server.body() == {
        "items": [{"id": "n1", "text": "Ada Lovelace worked with Charles Babbage in London."}],
        "params": {
            "labels": ["person", "location"],
            "output_schema": {"type": "object"},
            "instruction": "find people",
            "options": {"threshold": 0.4},
        },
    }
    assert result == ExtractResult(
        id="n1",
        entities=[
            Entity("Ada Lovelace", "person", 0.97, 0, 12, None),
            Entity("London", "location", 0.91, 44, 50, None),
        ],
        relations=[Relation("Ada Lovelace", "London", "lives_in", 0.5)],
        classifications=[Classification("bio", 0.8)],
        objects=[DetectedObject("face", 0.7, [1.0, 2.0, 3.0, 4.0])],
        data={"k": "v"},
        error=None,
    )


def test_extract_list_in_list_out(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(
        wire.msgpack(
            {
                "model": MODEL,
                "items": [
                    {"id": "x", "entities": [], "data": {}},
                    {
                        "id": "item-1",
                        "error": {"code": "INFERENCE_ERROR", "message": "bad image"},
                    },
                ],
            }
        )
    )
    results = client.extract(MODEL, [{"id": "x", "text": "a"}, "b"], labels="person")
    assert server.body() == {
        "items": [{"id": "x", "text": "a"}, {"text": "b"}],
        "params": {"labels": ["person"]},
    }
    assert isinstance(results, list)
    assert [r.id for r in results] == ["x", "item-1"]
    assert results[0] == ExtractResult(id="x")
    assert results[1].error == ItemError("INFERENCE_ERROR", "bad image")
    assert results[1].entities == [] and results[1].objects == []


def test_extract_without_params_omits_params(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.msgpack({"model": MODEL, "items": [{"id": "item-0"}]}))
    client.extract(MODEL, "t")
    assert server.body() == {"items": [{"text": "t"}]}


def test_extract_malformed_item_error_is_replaced(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.msgpack({"model": MODEL, "items": [{"id": "a", "error": {"code": ""}}]}))
    result = client.extract(MODEL, "t")
    assert result.error == ItemError("INTERNAL_ERROR", "Malformed extraction item error")


def test_extract_count_mismatch(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.msgpack({"model": MODEL, "items": []}))
    with pytest.raises(MalformedResponseError):
        client.extract(MODEL, "t")


# ---------------------------------------------------------------- models


def test_models_and_model(client: SiftClient, server: Any, wire: Any) -> None:
    info = {
        "name": MODEL,
        "outputs": ["dense"],
        "dims": {"dense": 384},
        "loaded": False,
    }
    server.reply(wire.json({"models": [info]}), wire.json(info))
    assert client.models() == [info]
    assert client.model(MODEL) == info
    for request in server.requests:
        assert request.method == "GET"
        assert request.headers["accept"] == "application/json"


def test_model_not_found(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.error(404, "MODEL_NOT_FOUND", "Model 'no/such' not found."))
    with pytest.raises(ModelNotFoundError) as info:
        client.model("no/such")
    assert info.value.status_code == 404
    assert info.value.code == "MODEL_NOT_FOUND"
    assert client.last_retry_count == 0
    assert server.paths == ["/v1/models/no/such"]


def test_models_requires_models_key(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.json([{"name": "x"}]))
    with pytest.raises(MalformedResponseError):
        client.models()


# ---------------------------------------------------------------- errors and retries


@pytest.mark.parametrize(
    ("response_args", "cls"),
    [
        ((400, "INVALID_INPUT"), RequestError),
        ((400, "INPUT_TOO_LONG"), InputTooLongError),
        ((401, None), AuthenticationError),
        ((404, "MODEL_NOT_FOUND"), ModelNotFoundError),
        ((500, "INFERENCE_ERROR"), ServerError),
        ((502, "MODEL_LOAD_FAILED"), ModelLoadFailedError),
        ((503, "MODEL_NOT_LOADED"), ServerError),
    ],
)
def test_terminal_errors_are_not_retried(
    client: SiftClient,
    server: Any,
    wire: Any,
    clock: Any,
    response_args: tuple[int, str | None],
    cls: type[Exception],
) -> None:
    server.reply(wire.error(*response_args, retry_after="1"), wire.encode(VECS[:1]))
    with pytest.raises(cls) as info:
        client.encode(MODEL, "x")
    assert type(info.value) is cls
    assert len(server.requests) == 1
    assert client.last_retry_count == 0
    assert clock.sleeps == []


def test_model_loading_retried_then_success(client: SiftClient, server: Any, wire: Any, clock: Any) -> None:
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="2"), wire.encode(VECS[:1]))
    out = client.encode(MODEL, "x")
    assert out.shape == (3,)
    assert client.last_retry_count == 1
    assert clock.sleeps == [2.0]
    assert len(server.requests) == 2
    assert server.body(0) == server.body(1)


def test_retry_with_real_noop_sleep(server: Any, wire: Any) -> None:
    slept: list[float] = []
    http = httpx.Client(transport=httpx.MockTransport(server.handler))
    client = SiftClient("http://x.test", http_client=http, sleep=slept.append)
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="1.5"), wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    assert client.last_retry_count == 1
    assert slept == [1.5]


def test_queue_full_retries_until_deadline_then_raises(make_client: Any, server: Any, wire: Any, clock: Any) -> None:
    client = make_client(retry_deadline_s=5.0)
    server.reply(wire.error(503, "QUEUE_FULL", "queue full", retry_after="1"))
    with pytest.raises(QueueFullError) as info:
        client.encode(MODEL, "x")
    assert info.value.status_code == 503
    assert info.value.retry_after == 1.0
    assert clock.sleeps == [1.0] * 5
    assert len(server.requests) == 6
    assert client.last_retry_count == 5


def test_model_loading_until_deadline_raises_model_loading_error(
    make_client: Any, server: Any, wire: Any, clock: Any
) -> None:
    client = make_client(retry_deadline_s=12.0)
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="5"))
    with pytest.raises(ModelLoadingError):
        client.encode(MODEL, "x")
    assert clock.sleeps == [5.0, 5.0, 2.0]  # the last wait is cut to the deadline
    assert client.last_retry_count == 3


def test_backoff_without_retry_after(make_client: Any, server: Any, wire: Any, clock: Any) -> None:
    client = make_client()
    server.reply(
        wire.error(503, "RESOURCE_EXHAUSTED"),
        wire.error(429, None),
        wire.error(503, "QUEUE_FULL"),
        wire.encode(VECS[:1]),
    )
    client.encode(MODEL, "x")
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert client.last_retry_count == 3


def test_header_error_code_drives_retry(client: SiftClient, server: Any, wire: Any) -> None:
    busy = wire.json({"detail": "busy"}, 503, {"X-SIE-Error-Code": "QUEUE_FULL", "Retry-After": "0"})
    server.reply(busy, wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    assert client.last_retry_count == 1


def test_zero_deadline_disables_retries(make_client: Any, server: Any, wire: Any) -> None:
    client = make_client(retry_deadline_s=0)
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="1"))
    with pytest.raises(ModelLoadingError):
        client.encode(MODEL, "x")
    assert len(server.requests) == 1


def test_retry_count_resets_per_call(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="1"), wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    assert client.last_retry_count == 1
    client.encode(MODEL, "x")
    assert client.last_retry_count == 0


def test_connect_errors_are_retried(client: SiftClient, server: Any, wire: Any, clock: Any) -> None:
    server.reply(httpx.ConnectError("refused"), wire.encode(VECS[:1]))
    client.encode(MODEL, "x")
    assert client.last_retry_count == 1
    assert clock.sleeps == [1.0]


def test_connect_errors_until_deadline(make_client: Any, server: Any, clock: Any) -> None:
    client = make_client(retry_deadline_s=3.0)
    server.reply(httpx.ConnectError("refused"))
    with pytest.raises(SiftConnectionError) as info:
        client.encode(MODEL, "x")
    assert info.value.status_code is None
    assert clock.sleeps == [1.0, 2.0]
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_read_timeout_is_not_retried(client: SiftClient, server: Any) -> None:
    server.reply(httpx.ReadTimeout("slow"))
    with pytest.raises(SiftTimeoutError):
        client.encode(MODEL, "x")
    assert len(server.requests) == 1
    assert client.last_retry_count == 0


def test_error_carries_body_details(client: SiftClient, server: Any, wire: Any) -> None:
    server.reply(
        wire.error(
            502,
            "MODEL_LOAD_FAILED",
            "gated",
            extra={"error_class": "GATED", "attempts": 1, "permanent": True},
        )
    )
    with pytest.raises(ModelLoadFailedError) as info:
        client.encode(MODEL, "x")
    assert info.value.error_class == "GATED"
    assert info.value.message == "gated"


def test_context_manager_closes_owned_client() -> None:
    with SiftClient() as client:
        http = client._http
    assert http.is_closed


def test_injected_http_client_is_left_open(server: Any) -> None:
    http = httpx.Client(transport=httpx.MockTransport(server.handler))
    with SiftClient(http_client=http):
        pass
    assert not http.is_closed
    http.close()
