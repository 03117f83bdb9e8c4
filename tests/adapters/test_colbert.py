"""ColbertAdapter: token vectors and MaxSim scores against PyLate (run on its own
pinned stack, see tests/fixtures/pylate_reference.py) on a tiny random ColBERT
that PyLate itself built, plus batching isolation and validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.base import EncodeTask, ExtractTask, Part, ScoreTask
from sift_server.adapters.colbert import ColbertAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.fixtures.pylate_reference import EMBEDDING_SIZE, build_and_reference
from tests.fixtures.tiny_models import build_tiny_backbone

TOL = 1e-5
QUERY_LENGTH, DOCUMENT_LENGTH = 12, 24
QUERIES = ["what is the capital of france?", "who wrote hamlet", "  late, interaction!  "]
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "Hamlet is a tragedy written by William Shakespeare, around 1600.",
    "x",
    "ColBERT scores (query, passage) pairs by late interaction: MaxSim over token vectors; "
    "this sentence is long enough to be cut at the document length.",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("colbert")
    backbone = build_tiny_backbone(root / "backbone", seed=21)
    out = root / "model"
    reference = build_and_reference(
        backbone, out, QUERIES, DOCUMENTS, query_length=QUERY_LENGTH, document_length=DOCUMENT_LENGTH
    )
    return out, reference


@pytest.fixture(scope="module")
def colbert(built: tuple[Path, dict[str, Any]]) -> ColbertAdapter:
    return ColbertAdapter.load(load_context(built[0]))


def encode(adapter: ColbertAdapter, *tasks: EncodeTask) -> list[list[np.ndarray]]:
    prepared = [adapter.prepare(t) for t in tasks]
    out = adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])
    return [[item["multivector"] for item in items] for items in out]


def test_info(colbert: ColbertAdapter) -> None:
    assert colbert.info.tasks == frozenset({"encode", "score"})
    assert colbert.info.outputs == ("multivector",)
    assert colbert.info.dims == {"multivector": EMBEDDING_SIZE}


def test_query_vectors_match_pylate(colbert: ColbertAdapter, built: tuple[Path, dict[str, Any]]) -> None:
    [ours] = encode(colbert, EncodeTask(texts=QUERIES, is_query=True))
    for mine, theirs in zip(ours, built[1]["queries"], strict=True):
        assert mine.shape == theirs.shape == (QUERY_LENGTH, EMBEDDING_SIZE)  # expanded with [MASK] tokens
        np.testing.assert_allclose(mine, theirs, atol=TOL, rtol=0)
        np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=TOL)


def test_document_vectors_match_pylate(colbert: ColbertAdapter, built: tuple[Path, dict[str, Any]]) -> None:
    [ours] = encode(colbert, EncodeTask(texts=DOCUMENTS))
    for mine, theirs in zip(ours, built[1]["documents"], strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, atol=TOL, rtol=0)
    # Punctuation is dropped and the long text is cut: fewer vectors than tokens.
    assert ours[3].shape[0] < DOCUMENT_LENGTH


def test_scores_match_pylate(colbert: ColbertAdapter, built: tuple[Path, dict[str, Any]]) -> None:
    expected = built[1]["scores"]
    for q, query in enumerate(QUERIES):
        prepared = colbert.prepare(ScoreTask(query=query, texts=DOCUMENTS))
        [scores] = colbert.forward([Part(prepared, 0, len(DOCUMENTS))])
        assert all(type(s) is float for s in scores)
        np.testing.assert_allclose(scores, expected[q], atol=TOL * 10, rtol=1e-6)


def test_fused_and_split_forwards_equal_separate(colbert: ColbertAdapter) -> None:
    tasks = [EncodeTask(texts=QUERIES[:2], is_query=True), EncodeTask(texts=DOCUMENTS), EncodeTask(texts=[QUERIES[2]])]
    fused = encode(colbert, *tasks)
    for task, together in zip(tasks, fused, strict=True):
        [alone] = encode(colbert, task)
        for a, b in zip(together, alone, strict=True):
            np.testing.assert_allclose(a, b, atol=TOL, rtol=0)
    a = colbert.prepare(ScoreTask(query=QUERIES[0], texts=DOCUMENTS))
    b = colbert.prepare(ScoreTask(query=QUERIES[1], texts=DOCUMENTS[:2]))
    split = colbert.forward([Part(a, 0, 2), Part(b, 0, 2), Part(a, 2, 4)])
    [whole_a] = colbert.forward([Part(a, 0, 4)])
    [whole_b] = colbert.forward([Part(b, 0, 2)])
    np.testing.assert_allclose(split[0] + split[2], whole_a, atol=TOL * 10)
    np.testing.assert_allclose(split[1], whole_b, atol=TOL * 10)


def test_compat_keys_and_costs(colbert: ColbertAdapter) -> None:
    query = colbert.prepare(EncodeTask(texts=["hi"], is_query=True))
    document = colbert.prepare(EncodeTask(texts=["hi"]))
    score = colbert.prepare(ScoreTask(query="hi", texts=["a", "b"]))
    assert query.compat_key == document.compat_key != score.compat_key
    assert query.item_costs == [QUERY_LENGTH]
    assert document.item_costs == [4]  # [CLS] [D] hi [SEP]
    assert score.input_tokens == QUERY_LENGTH + 8


def test_invalid(colbert: ColbertAdapter) -> None:
    with pytest.raises(InvalidInput):
        colbert.prepare(ExtractTask(texts=["x"], labels=["a"]))
    with pytest.raises(InputTooLong):
        colbert.prepare(EncodeTask(texts=[DOCUMENTS[3]], overflow="error"))
