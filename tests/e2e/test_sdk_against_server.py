"""Our SDK, sync and async, against the real server and the real model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from sift_sdk import AsyncSiftClient, ModelNotFoundError, RequestError, SiftClient
from tests.e2e.conftest import DEFAULT_MODEL
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_embedder import TINY_EMBEDDER


def test_sync_client_encode_models_and_errors(server: ServerProcess) -> None:
    with SiftClient(server.url) as client:
        vectors = client.encode(DEFAULT_MODEL, ["hello world", "goodbye world"])
        assert vectors.shape == (2, 384) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        single = client.encode(DEFAULT_MODEL, "hello world", is_query=True)
        assert single.shape == (384,) and np.allclose(single, vectors[0], atol=1e-6)
        packed = client.encode(DEFAULT_MODEL, ["hello world"], output_dtype="binary")
        assert packed.shape == (1, 48) and packed.dtype == np.uint8
        full = client.encode_full(DEFAULT_MODEL, [{"id": "a", "text": "x"}, {"text": "y"}])
        assert full.items[0]["id"] == "a" and "id" not in full.items[1]
        assert full.timing is not None and full.timing["inference_ms"] >= 0
        names = [m["name"] for m in client.models()]
        assert DEFAULT_MODEL in names and TINY_EMBEDDER in names
        assert client.model(DEFAULT_MODEL)["dims"]["dense"] == 384
        with pytest.raises(ModelNotFoundError) as missing:
            client.encode("no-such-org/no-such-model", "x")
        assert missing.value.status_code == 404 and missing.value.code == "MODEL_NOT_FOUND"
        assert client.last_retry_count == 0
        with pytest.raises(RequestError) as bad:
            client.encode(DEFAULT_MODEL, [{"id": "ok", "text": "x"}], output_dtype="bfloat16")
        assert bad.value.status_code == 400 and bad.value.code == "INVALID_INPUT"


async def test_async_client_concurrent_encodes_each_get_their_own_vector(server: ServerProcess) -> None:
    texts = [f"async sentence {i}" for i in range(24)]
    async with AsyncSiftClient(server.url) as client:
        together = await client.encode(DEFAULT_MODEL, texts)
        separately = await asyncio.gather(*(client.encode(DEFAULT_MODEL, t) for t in texts))
    assert np.allclose(np.stack(separately), together, atol=1e-5)
