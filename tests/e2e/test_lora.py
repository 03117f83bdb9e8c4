"""LoRA end to end: a tiny embedder and a tiny cross-encoder with LoRAs in the
catalog of the e2e group's ``server`` (tests/e2e/tiny_tasks.py). The first encode
for a LoRA is a 503 LORA_LOADING with Retry-After: 1; then the LoRA lane answers
what the peft-merged model answers; score waits for its LoRA; unknown LoRAs are
400 naming them; the base lane is unaffected."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from sift_server.adapters.base import EncodeTask, LoadContext, Part, ScoreTask
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.e2e.tiny_tasks import LORA_EMBED as EMBED
from tests.e2e.tiny_tasks import LORA_RERANK as RERANK
from tests.e2e.tiny_tasks import TaskModels
from tests.fixtures.server_process import ServerProcess

TEXTS = ["What is the capital of France?", "Paris is the capital of France."]


@pytest.fixture
def folders(task_models: TaskModels) -> dict[str, Path]:
    return {key.removeprefix("lora-"): folder for key, folder in task_models.folders.items()}


def context(folder: Path) -> LoadContext:
    return LoadContext(path=folder, options={"device": "cpu"}, max_sequence_length=None, torch_threads=0)


def encode(server: ServerProcess, options: dict[str, object]) -> httpx.Response:
    body = {"items": [{"text": t} for t in TEXTS], "params": {"options": options}}
    return httpx.post(server.url + f"/v1/encode/{EMBED}", json=body, headers={"Accept": "application/json"})


def until_loaded(server: ServerProcess, options: dict[str, object]) -> httpx.Response:
    """Retry as the SIE SDK does on LORA_LOADING (bounded; no timing is asserted)."""
    for _ in range(200):
        response = encode(server, options)
        if response.status_code != 503:
            return response
        time.sleep(0.05)
    raise AssertionError("the LoRA never finished loading")


def test_encode_lora_loading_then_merged_parity(server: ServerProcess, folders: dict[str, Path]) -> None:
    first = encode(server, {"lora": "legal"})
    assert first.status_code == 503
    assert first.headers["Retry-After"] == "1"
    assert first.json()["detail"]["code"] == "LORA_LOADING"
    response = until_loaded(server, {"lora_id": "legal"})  # the reference's other spelling
    assert response.status_code == 200, response.text
    ours = np.array([item["dense"]["values"] for item in response.json()["items"]])
    merged = SentenceEmbedderAdapter.load(context(folders["embed-merged"]))
    prepared = merged.prepare(EncodeTask(TEXTS))
    [expected] = merged.forward([Part(prepared, 0, 2)])
    np.testing.assert_allclose(ours, np.stack(expected), atol=1e-5, rtol=0)
    base = encode(server, {})
    assert base.status_code == 200
    assert np.abs(np.array([i["dense"]["values"] for i in base.json()["items"]]) - ours).max() > 1e-3


def test_score_waits_for_its_lora(server: ServerProcess, folders: dict[str, Path]) -> None:
    body = {"query": {"text": TEXTS[0]}, "items": [{"id": "a", "text": TEXTS[1]}, {"id": "b", "text": "bananas"}]}
    body["options"] = {"lora": "medical"}
    response = httpx.post(server.url + f"/v1/score/{RERANK}", json=body, headers={"Accept": "application/json"})
    assert response.status_code == 200, response.text
    got = {entry["item_id"]: entry["score"] for entry in response.json()["scores"]}
    merged = CrossEncoderAdapter.load(context(folders["rerank-merged"]))
    prepared = merged.prepare(ScoreTask(query=TEXTS[0], texts=[TEXTS[1], "bananas"]))
    [expected] = merged.forward([Part(prepared, 0, 2)])
    np.testing.assert_allclose([got["a"], got["b"]], expected, atol=1e-5)


def test_unknown_and_broken_loras(server: ServerProcess) -> None:
    unknown = encode(server, {"lora": "nope"})
    assert unknown.status_code == 400 and "'nope'" in unknown.json()["detail"]["message"]
    assert unknown.json()["detail"]["code"] == "INVALID_INPUT"
    broken = until_loaded(server, {"lora": "gone"})
    assert broken.status_code == 400 and "'gone'" in broken.json()["detail"]["message"]
    assert encode(server, {}).status_code == 200  # nothing else is affected
