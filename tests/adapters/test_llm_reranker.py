"""LlmRerankerAdapter on a tiny random Qwen3 causal LM: equal within 1e-5 to the
Qwen3-Reranker model card's computation with plain transformers (recorded once,
tests/adapters/parity), pairs independent of what shares their forward, and clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import Part, ScoreTask
from sift_server.adapters.llm_reranker import LlmRerankerAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.parity.decoder_cases import RERANK_DOCS, RERANK_QUERY, SCORE_CASES
from tests.adapters.parity.decoder_compare import TOL, recorded
from tests.fixtures.tiny_decoder import build_tiny_qwen3_reranker
from tests.fixtures.tiny_embedder import build_tiny_embedder

MAX_LENGTH = 512  # what the recorded reference used


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_reranker(tmp_path_factory.mktemp("qwen3_reranker"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> LlmRerankerAdapter:
    return LlmRerankerAdapter.load(load_context(folder, MAX_LENGTH))


def task_of(case: dict[str, Any]) -> ScoreTask:
    return ScoreTask(query=case["query"], texts=case["texts"], instruction=case.get("instruction"))


def run(adapter: LlmRerankerAdapter, *tasks: ScoreTask) -> list[list[float]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_equals_the_model_cards_computation(adapter: LlmRerankerAdapter, case: dict[str, Any]) -> None:
    expected = recorded()["score"][case["name"]]
    (scores,) = run(adapter, task_of(case))
    np.testing.assert_allclose(scores, expected, atol=TOL, rtol=0)


def test_the_cases_are_not_vacuous() -> None:
    scores = recorded()["score"]
    default = scores["default-instruction"]
    assert len(set(np.round(default, 4))) == len(default)  # distinct scores: an order to get right
    assert all(0.0 < s < 1.0 for s in default)
    assert not np.allclose(default[:3], scores["instruction"], atol=1e-4)


def test_pairs_do_not_depend_on_what_shares_their_forward(adapter: LlmRerankerAdapter) -> None:
    first, second = task_of(SCORE_CASES[0]), task_of(SCORE_CASES[1])
    together = run(adapter, first, second)
    np.testing.assert_allclose(together[0], run(adapter, first)[0], atol=TOL, rtol=0)
    np.testing.assert_allclose(together[1], run(adapter, second)[0], atol=TOL, rtol=0)
    assert adapter.prepare(first).compat_key == adapter.prepare(second).compat_key


def test_a_long_document_is_cut_and_the_query_kept(adapter: LlmRerankerAdapter) -> None:
    prepared = adapter.prepare(task_of(SCORE_CASES[0]))
    assert max(prepared.item_costs) == MAX_LENGTH
    with pytest.raises(InputTooLong):
        adapter.prepare(ScoreTask(query=RERANK_QUERY, texts=RERANK_DOCS, overflow="error"))
    with pytest.raises(InputTooLong):
        adapter.prepare(ScoreTask(query="q" * 600, texts=["a"]))


def test_requests_it_cannot_take(adapter: LlmRerankerAdapter) -> None:
    with pytest.raises(InvalidInput):
        adapter.prepare(ScoreTask(query="q", texts=[]))
    assert adapter.info.tasks == frozenset({"score"}) and adapter.info.outputs == ("score",)


def test_an_encoder_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnservableModel, match="not a causal language model"):
        LlmRerankerAdapter.load(load_context(build_tiny_embedder(tmp_path / "bert")))


def test_an_auto_entry_runs_on_pytorch_and_exports_nothing(folder: Path, tmp_path: Path) -> None:
    """The record runs llm-reranker on PyTorch only (no background decision is planned for it),
    so ``auto`` must not export and time candidates in the loading process and then serve
    another runtime, which its parity tests do not cover."""
    import dataclasses

    cache = tmp_path / "artifacts"
    ctx = dataclasses.replace(load_context(folder, MAX_LENGTH), backend="auto", precision=None, cache_dir=cache)
    loaded = LlmRerankerAdapter.load(ctx)
    assert loaded.info.runtime["backend"] == "torch"
    assert not cache.exists() or not any(cache.rglob("*"))
