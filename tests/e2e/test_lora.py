"""LoRA end to end: a tiny embedder and a tiny cross-encoder with LoRAs in the
catalog. The first encode for a LoRA is a 503 LORA_LOADING with Retry-After: 1;
then the LoRA lane answers what the peft-merged model answers; score waits for
its LoRA; unknown LoRAs are 400 naming them; the base lane is unaffected."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from sift_server.adapters.base import EncodeTask, LoadContext, Part, ScoreTask
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_lora, merge_lora

EMBED, RERANK = "tiny/lora-embedder", "tiny/lora-reranker"
TEXTS = ["What is the capital of France?", "Paris is the capital of France."]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora-e2e")
    embed = build_tiny_embedder(root / "embed")
    rerank = build_tiny_cross_encoder(root / "rerank")
    lora = build_tiny_lora(embed, root / "embed-lora", seed=5)
    rerank_lora = build_tiny_lora(rerank, root / "rerank-lora", seed=6, sequence_classification=True)
    return {
        "embed": embed,
        "rerank": rerank,
        "embed-lora": lora,
        "rerank-lora": rerank_lora,
        "embed-merged": merge_lora(embed, lora, root / "embed-merged"),
        "rerank-merged": merge_lora(rerank, rerank_lora, root / "rerank-merged", sequence_classification=True),
    }


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory, folders: dict[str, Path]) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("lora-server")
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "embed.yaml").write_text(
        f"name: {EMBED}\nadapter: sentence-embedder\nsource: {{path: {folders['embed']}}}\ntasks: [encode]\n"
        f"loras:\n  legal: {{path: {folders['embed-lora']}}}\n  gone: {{path: {root / 'missing'}}}\n"
    )
    (catalog / "rerank.yaml").write_text(
        f"name: {RERANK}\nadapter: cross-encoder\nsource: {{path: {folders['rerank']}}}\ntasks: [score]\n"
        f"loras:\n  medical: {{path: {folders['rerank-lora']}}}\n"
    )
    proc = start_server(["--catalog", str(catalog), "--preload", EMBED, "--preload", RERANK], root / "server.log")
    yield proc
    proc.stop()


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


def test_encode_lora_loading_then_merged_parity(lora_server: ServerProcess, folders: dict[str, Path]) -> None:
    first = encode(lora_server, {"lora": "legal"})
    assert first.status_code == 503
    assert first.headers["Retry-After"] == "1"
    assert first.json()["detail"]["code"] == "LORA_LOADING"
    response = until_loaded(lora_server, {"lora_id": "legal"})  # the reference's other spelling
    assert response.status_code == 200, response.text
    ours = np.array([item["dense"]["values"] for item in response.json()["items"]])
    merged = SentenceEmbedderAdapter.load(context(folders["embed-merged"]))
    prepared = merged.prepare(EncodeTask(TEXTS))
    [expected] = merged.forward([Part(prepared, 0, 2)])
    np.testing.assert_allclose(ours, np.stack(expected), atol=1e-5, rtol=0)
    base = encode(lora_server, {})
    assert base.status_code == 200
    assert np.abs(np.array([i["dense"]["values"] for i in base.json()["items"]]) - ours).max() > 1e-3


def test_score_waits_for_its_lora(lora_server: ServerProcess, folders: dict[str, Path]) -> None:
    body = {"query": {"text": TEXTS[0]}, "items": [{"id": "a", "text": TEXTS[1]}, {"id": "b", "text": "bananas"}]}
    body["options"] = {"lora": "medical"}
    response = httpx.post(lora_server.url + f"/v1/score/{RERANK}", json=body, headers={"Accept": "application/json"})
    assert response.status_code == 200, response.text
    got = {entry["item_id"]: entry["score"] for entry in response.json()["scores"]}
    merged = CrossEncoderAdapter.load(context(folders["rerank-merged"]))
    prepared = merged.prepare(ScoreTask(query=TEXTS[0], texts=[TEXTS[1], "bananas"]))
    [expected] = merged.forward([Part(prepared, 0, 2)])
    np.testing.assert_allclose([got["a"], got["b"]], expected, atol=1e-5)


def test_unknown_and_broken_loras(lora_server: ServerProcess) -> None:
    unknown = encode(lora_server, {"lora": "nope"})
    assert unknown.status_code == 400 and "'nope'" in unknown.json()["detail"]["message"]
    assert unknown.json()["detail"]["code"] == "INVALID_INPUT"
    broken = until_loaded(lora_server, {"lora": "gone"})
    assert broken.status_code == 400 and "'gone'" in broken.json()["detail"]["message"]
    assert encode(lora_server, {}).status_code == 200  # nothing else is affected
