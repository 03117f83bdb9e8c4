"""End-to-end encode against the real server and the real default model."""

from __future__ import annotations

import httpx
import msgpack
import numpy as np
import pytest

from tests.e2e.conftest import DEFAULT_MODEL
from tests.e2e.corpus import corpus
from tests.fixtures.server_process import ServerProcess

MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
ENCODE = f"/v1/encode/{DEFAULT_MODEL}"


def post_msgpack(server: ServerProcess, path: str, body: object, **headers: str) -> httpx.Response:
    return httpx.post(server.url + path, content=msgpack.packb(body), headers={**MSGPACK, **headers}, timeout=120)


def nd_to_array(nd: dict[bytes, object]) -> np.ndarray:
    return np.frombuffer(nd[b"data"], dtype=np.dtype(nd[b"type"])).reshape(nd[b"shape"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def reference() -> object:
    from sentence_transformers import SentenceTransformer

    from tests.fixtures.tiny_embedder import minilm_folder

    return SentenceTransformer(str(minilm_folder()), device="cpu")


def test_vectors_match_sentence_transformers_on_a_varied_corpus(server: ServerProcess, reference: object) -> None:
    texts = corpus()
    assert len(texts) >= 50
    response = post_msgpack(server, ENCODE, {"items": [{"text": t} for t in texts]})
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content, raw=False)["items"]
    ours = np.stack([nd_to_array(item["dense"]["values"]) for item in items])
    theirs = reference.encode(texts, batch_size=16)  # type: ignore[attr-defined]
    assert ours.shape == theirs.shape == (len(texts), 384)
    cosines = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.9999, (worst, texts[worst][:80], cosines[worst])


def test_msgpack_layout_headers_and_negotiation(server: ServerProcess) -> None:
    response = post_msgpack(server, ENCODE, {"items": [{"text": "x"}]})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/msgpack"
    for header in ("X-Queue-Time", "X-Inference-Time", "X-Total-Time", "X-Tokenization-Time"):
        float(response.headers[header])
    assert response.headers["X-SIE-Server-Version"].startswith("0.10.")
    assert response.headers["X-SIE-Served-By"] == "local"
    assert len(response.headers["X-SIE-Runtime-Instance"]) == 64
    body = msgpack.unpackb(response.content, raw=False)
    values = body["items"][0]["dense"]["values"]
    assert set(values) == {b"nd", b"type", b"kind", b"shape", b"data"}
    assert values[b"nd"] is True and values[b"type"] == "<f4" and values[b"kind"] == b""
    assert values[b"shape"] == [384] and len(values[b"data"]) == 4 * 384
    assert body["items"][0]["dense"]["dims"] == 384 and "id" not in body["items"][0]
    assert set(body["timing"]) == {"total_ms", "queue_ms", "tokenization_ms", "inference_ms", "postprocessing_ms"}
    assert body["usage"]["input_tokens"] > 0

    as_json = post_msgpack(server, ENCODE, {"items": [{"text": "x"}]}, Accept="application/json")
    assert as_json.headers["content-type"] == "application/json"
    vector = as_json.json()["items"][0]["dense"]["values"]
    assert len(vector) == 384 and np.allclose(vector, nd_to_array(values), atol=1e-6)

    star = post_msgpack(server, ENCODE, {"items": [{"text": "x"}]}, Accept="*/*")
    assert star.headers["content-type"] == "application/msgpack"


def test_json_request_ids_echoed_only_when_given(server: ServerProcess) -> None:
    response = httpx.post(
        server.url + ENCODE,
        json={"items": [{"id": "a", "text": "x"}, {"text": "y"}], "params": {"options": {"is_query": True}}},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200
    items = response.json()["items"]
    assert items[0]["id"] == "a" and "id" not in items[1]


def test_instruction_changes_the_vector(server: ServerProcess) -> None:
    def vector(params: dict[str, object]) -> np.ndarray:
        body = {"items": [{"text": "capital of France"}], "params": params}
        response = httpx.post(server.url + ENCODE, json=body, headers={"Accept": "application/json"})
        assert response.status_code == 200, response.text
        return np.array(response.json()["items"][0]["dense"]["values"])

    plain = vector({})
    instructed = vector({"instruction": "Represent the question for retrieval:"})
    assert not np.allclose(plain, instructed)


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype", "length"),
    [
        ("float32", "<f4", 384),
        ("float16", "<f2", 384),
        ("int8", "|i1", 384),
        ("uint8", "|u1", 384),
        ("binary", "|u1", 48),
        ("ubinary", "|u1", 48),
    ],
)
def test_output_dtypes(server: ServerProcess, dtype: str, numpy_dtype: str, length: int) -> None:
    body = {"items": [{"text": "quantize me"}], "params": {"output_dtype": dtype}}
    response = post_msgpack(server, ENCODE, body)
    assert response.status_code == 200, response.text
    dense = msgpack.unpackb(response.content, raw=False)["items"][0]["dense"]
    assert dense["values"][b"type"] == numpy_dtype
    assert dense["values"][b"shape"] == [length]
    assert dense["dims"] == 384
    assert dense["dtype"] == ("binary" if dtype == "ubinary" else dtype)
    reference = post_msgpack(server, ENCODE, {"items": [{"text": "quantize me"}]})
    floats = nd_to_array(msgpack.unpackb(reference.content, raw=False)["items"][0]["dense"]["values"])
    got = nd_to_array(dense["values"])
    if dtype in ("binary", "ubinary"):
        assert np.array_equal(got, np.packbits(floats > 0))
    elif dtype == "int8":
        assert np.array_equal(got, np.rint(floats * 127 / np.abs(floats).max()).astype(np.int8))
    elif dtype == "float16":
        assert np.allclose(got.astype(np.float32), floats, atol=1e-3)


def test_model_listing_and_lookup(server: ServerProcess) -> None:
    listing = httpx.get(server.url + "/v1/models").json()["models"]
    names = [m["name"] for m in listing]
    assert DEFAULT_MODEL in names
    info = httpx.get(server.url + f"/v1/models/{DEFAULT_MODEL}").json()
    assert info["name"] == DEFAULT_MODEL and info["dims"]["dense"] == 384
    assert info["loaded"] is True and info["state"] == "loaded" and info["outputs"] == ["dense"]
    assert len(info["profiles"]["default"]["runtime_instance_id"]) == 64
    missing = httpx.get(server.url + "/v1/models/no-such-org/no-such-model")
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"


def test_health_probes(server: ServerProcess) -> None:
    for probe in ("/healthz", "/livez", "/readyz"):
        response = httpx.get(server.url + probe)
        assert (response.status_code, response.text) == (200, "ok")
    metrics = httpx.get(server.url + "/metrics")
    assert "sie_gpu_batch_items_bucket" in metrics.text


def test_percent_encoded_model_name_reaches_the_same_model(server: ServerProcess) -> None:
    path = "/v1/encode/" + DEFAULT_MODEL.replace("/", "%2F")
    response = httpx.post(server.url + path, json={"items": [{"text": "x"}]}, headers={"Accept": "application/json"})
    assert response.status_code == 200
    assert response.json()["model"] == DEFAULT_MODEL


def test_cold_model_answers_model_loading_then_serves(server: ServerProcess) -> None:
    path = "/v1/encode/tiny/embedder"
    before = server.output.mark()
    first = post_msgpack(server, path, {"items": [{"text": "x"}]})
    assert first.status_code == 503
    assert first.json()["detail"]["code"] == "MODEL_LOADING"
    assert int(first.headers["Retry-After"]) >= 1
    # The registry logs this line once the model serves: wait for it rather than polling the endpoint.
    server.output.wait_for_line("model tiny/embedder loaded", timeout=120, after=before)
    again = post_msgpack(server, path, {"items": [{"text": "x"}]})
    assert again.status_code == 200
    assert msgpack.unpackb(again.content, raw=False)["items"][0]["dense"]["dims"] == 32
    info = httpx.get(server.url + "/v1/models/tiny/embedder").json()
    assert info["state"] == "loaded"


def test_openai_embeddings(server: ServerProcess) -> None:
    url = server.url + "/v1/embeddings"
    floats = httpx.post(url, json={"model": DEFAULT_MODEL, "input": ["a", "b"]})
    assert floats.status_code == 200
    body = floats.json()
    assert body["object"] == "list" and body["model"] == DEFAULT_MODEL
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 384 for d in body["data"])
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    assert floats.headers["X-SIE-Served-By"] == "local"

    import base64

    b64 = httpx.post(url, json={"model": DEFAULT_MODEL, "input": ["a", "b"], "encoding_format": "base64"}).json()
    for packed, plain in zip(b64["data"], body["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(packed["embedding"]), "<f4")
        assert np.allclose(decoded, plain["embedding"], atol=1e-6)

    single = httpx.post(url, json={"model": DEFAULT_MODEL, "input": "a", "dimensions": 384})
    assert single.status_code == 200 and len(single.json()["data"]) == 1


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"model": DEFAULT_MODEL, "input": [[1, 2, 3]]}, 400, "invalid_request", "input"),
        ({"model": DEFAULT_MODEL, "input": []}, 400, "invalid_request", "input"),
        ({"model": DEFAULT_MODEL, "input": "a", "dimensions": 385}, 400, "unsupported_field", "dimensions"),
        ({"model": "no-such/model", "input": "a"}, 404, "model_not_found", None),
    ],
)
def test_openai_errors(server: ServerProcess, body: dict[str, object], status: int, code: str, param: str) -> None:
    response = httpx.post(server.url + "/v1/embeddings", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]


def test_openai_bad_encoding_format_is_a_400_in_the_openai_envelope(server: ServerProcess) -> None:
    response = httpx.post(
        server.url + "/v1/embeddings", json={"model": DEFAULT_MODEL, "input": "a", "encoding_format": "hex"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "encoding_format"


def test_openai_python_client(server: ServerProcess) -> None:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")
    result = client.embeddings.create(model=DEFAULT_MODEL, input=["a", "b"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 384
