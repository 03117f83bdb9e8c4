"""LoRA adapters through peft: the LoRA lane of a sentence embedder and of a
cross-encoder equals the base model with that LoRA merged offline by peft;
switching LoRAs between forwards costs no reload; the base lane stays the base
model; a LoRA that does not fit is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._lora import LANE_PREFIX, LoraDoesNotFit
from sift_server.adapters.base import Adapter, EncodeTask, Part, ScoreTask, TaskInput
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.adapters.conftest import load_context
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_lora, merge_lora, tiny_bert_config

TOL = 1e-5
TEXTS = ["What is the capital of France?", "Paris is the capital of France.", "x"]


def run(adapter: Adapter, task: TaskInput, lora: str | None = None) -> np.ndarray:
    prepared = adapter.prepare(task)
    prepared.lane = LANE_PREFIX + lora if lora else None
    [out] = adapter.forward([Part(prepared, 0, len(prepared.item_costs))])
    return np.asarray(out, dtype=np.float64)


@pytest.fixture(scope="module")
def embedder_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora-embedder")
    base = build_tiny_embedder(root / "base")
    a = build_tiny_lora(base, root / "lora-a", seed=1)
    b = build_tiny_lora(base, root / "lora-b", seed=2)
    return {
        "base": base,
        "a": a,
        "b": b,
        "merged-a": merge_lora(base, a, root / "merged-a"),
        "merged-b": merge_lora(base, b, root / "merged-b"),
    }


@pytest.fixture(scope="module")
def reranker_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora-reranker")
    base = build_tiny_cross_encoder(root / "base")
    a = build_tiny_lora(base, root / "lora-a", seed=3, sequence_classification=True)
    return {"base": base, "a": a, "merged-a": merge_lora(base, a, root / "merged-a", sequence_classification=True)}


def test_embedder_lora_equals_the_merged_model(embedder_models: dict[str, Path]) -> None:
    adapter = SentenceEmbedderAdapter.load(load_context(embedder_models["base"]))
    base_out = run(adapter, EncodeTask(TEXTS))
    adapter.load_lora("a", embedder_models["a"])
    adapter.load_lora("b", embedder_models["b"])
    merged_a = SentenceEmbedderAdapter.load(load_context(embedder_models["merged-a"]))
    merged_b = SentenceEmbedderAdapter.load(load_context(embedder_models["merged-b"]))
    expected = {"a": run(merged_a, EncodeTask(TEXTS)), "b": run(merged_b, EncodeTask(TEXTS)), None: base_out}
    assert np.abs(expected["a"] - base_out).max() > 1e-3  # the LoRA really changes the vectors
    # Alternate lanes between forwards: each answer is its model's, and nothing reloads.
    for lora in ["a", "b", None, "a", None, "b", "b", "a"]:
        np.testing.assert_allclose(run(adapter, EncodeTask(TEXTS), lora), expected[lora], atol=TOL, rtol=0)
    assert adapter.loras.loads == 2


def test_cross_encoder_lora_equals_the_merged_model(reranker_models: dict[str, Path]) -> None:
    adapter = CrossEncoderAdapter.load(load_context(reranker_models["base"]))
    task = ScoreTask(query=TEXTS[0], texts=TEXTS)
    base_out = run(adapter, task)
    adapter.load_lora("a", reranker_models["a"])
    merged = CrossEncoderAdapter.load(load_context(reranker_models["merged-a"]))
    expected = run(merged, task)
    assert np.abs(expected - base_out).max() > 1e-3
    for _ in range(2):
        np.testing.assert_allclose(run(adapter, task, "a"), expected, atol=TOL, rtol=0)
        np.testing.assert_allclose(run(adapter, task), base_out, atol=TOL, rtol=0)  # head and layers off
    assert adapter.loras.loads == 1


def test_unloaded_lora_reloads_when_a_request_still_needs_it(embedder_models: dict[str, Path]) -> None:
    adapter = SentenceEmbedderAdapter.load(load_context(embedder_models["base"]))
    adapter.load_lora("a", embedder_models["a"])
    adapter.load_lora("b", embedder_models["b"])
    adapter.unload_lora("a")
    assert adapter.loras.loaded() == ["b"]
    merged_a = SentenceEmbedderAdapter.load(load_context(embedder_models["merged-a"]))
    np.testing.assert_allclose(run(adapter, EncodeTask(TEXTS), "a"), run(merged_a, EncodeTask(TEXTS)), atol=TOL)
    assert adapter.loras.loads == 3


def test_lora_that_does_not_fit(tmp_path: Path, embedder_models: dict[str, Path]) -> None:
    from transformers import BertModel

    other = tmp_path / "wider"
    BertModel(tiny_bert_config(hidden_size=48, intermediate_size=96)).save_pretrained(other)
    wider = build_tiny_lora(other, tmp_path / "wider-lora", seed=4)
    adapter = SentenceEmbedderAdapter.load(load_context(embedder_models["base"]))
    with pytest.raises(LoraDoesNotFit):
        adapter.load_lora("wider", wider)
    # The model still serves its base lane and other LoRAs.
    adapter.load_lora("a", embedder_models["a"])
    assert run(adapter, EncodeTask(TEXTS), "a").shape == (3, 32)


def test_adapters_without_lora_say_so(tmp_path: Path) -> None:
    from sift_server.adapters.gliclass.adapter import GliClassAdapter

    assert not GliClassAdapter.supports_lora
    assert SentenceEmbedderAdapter.supports_lora and CrossEncoderAdapter.supports_lora
    with pytest.raises(NotImplementedError):
        Adapter.load_lora(Any, "x", tmp_path)  # type: ignore[arg-type]
