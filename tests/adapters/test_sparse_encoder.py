"""SparseEncoderAdapter: parity with sentence-transformers' ``SparseEncoder``
(encode_query / encode_document) on a tiny random SPLADE model, batching
isolation, costs and length handling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.base import EncodeTask, Part, ScoreTask
from sift_server.adapters.sparse_encoder import SparseEncoderAdapter, SparseVector
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.fixtures.tiny_models import build_tiny_sparse_encoder

TOL = 1e-5
TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "x",
    "Sparse retrieval weights every vocabulary term of a passage.",
]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def sparse_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sparse_encoder(tmp_path_factory.mktemp("sparse"), prompts=PROMPTS)


@pytest.fixture(scope="module")
def sparse(sparse_dir: Path) -> SparseEncoderAdapter:
    return SparseEncoderAdapter.load(load_context(sparse_dir))


@pytest.fixture(scope="module")
def reference(sparse_dir: Path) -> Any:
    from sentence_transformers import SparseEncoder

    return SparseEncoder(str(sparse_dir), device="cpu", local_files_only=True)


def run(adapter: SparseEncoderAdapter, *tasks: EncodeTask) -> list[list[SparseVector]]:
    prepared = [adapter.prepare(task) for task in tasks]
    out = adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])
    return [[item["sparse"] for item in items] for items in out]


def assert_matches(vector: SparseVector, expected: Any) -> None:
    row = expected.to_dense().numpy() if expected.is_sparse else expected.numpy()
    indices = np.flatnonzero(row)
    assert vector.indices.dtype == np.int32 and vector.values.dtype == np.float32
    assert np.array_equal(vector.indices, indices)
    assert np.all(np.diff(vector.indices) > 0)  # ascending
    np.testing.assert_allclose(vector.values, row[indices], atol=TOL, rtol=0)


def test_info(sparse: SparseEncoderAdapter) -> None:
    assert sparse.info.tasks == frozenset({"encode"})
    assert sparse.info.outputs == ("sparse",)
    assert sparse.info.dims == {"sparse": 30522}


@pytest.mark.parametrize("is_query", [True, False])
def test_matches_sparse_encoder(sparse: SparseEncoderAdapter, reference: Any, is_query: bool) -> None:
    [vectors] = run(sparse, EncodeTask(texts=TEXTS, is_query=is_query))
    encode = reference.encode_query if is_query else reference.encode_document
    expected = encode(TEXTS, batch_size=2)
    for vector, row in zip(vectors, expected, strict=True):
        assert_matches(vector, row)
        assert len(vector.indices) > 0


def test_queries_and_documents_differ(sparse: SparseEncoderAdapter) -> None:
    [[query]] = run(sparse, EncodeTask(texts=TEXTS[:1], is_query=True))
    [[document]] = run(sparse, EncodeTask(texts=TEXTS[:1], is_query=False))
    assert not (np.array_equal(query.indices, document.indices) and np.allclose(query.values, document.values))


def test_instruction_is_the_prompt(sparse: SparseEncoderAdapter, reference: Any) -> None:
    [vectors] = run(sparse, EncodeTask(texts=TEXTS[:2], instruction="Represent this: "))
    for vector, row in zip(vectors, reference.encode(TEXTS[:2], prompt="Represent this: "), strict=True):
        assert_matches(vector, row)


def test_max_active_dims_keeps_the_largest(sparse_dir: Path, reference: Any) -> None:
    capped = SparseEncoderAdapter.load(load_context(sparse_dir, max_active_dims=16))
    [vectors] = run(capped, EncodeTask(texts=TEXTS))
    for vector, row in zip(vectors, reference.encode_document(TEXTS, max_active_dims=16), strict=True):
        assert len(vector.indices) <= 16
        assert_matches(vector, row)


def test_fused_forward_equals_separate(sparse: SparseEncoderAdapter) -> None:
    tasks = [EncodeTask(texts=TEXTS[:2], is_query=True), EncodeTask(texts=TEXTS[2:]), EncodeTask(texts=[TEXTS[1]])]
    prepared = [sparse.prepare(t) for t in tasks]
    fused = sparse.forward([Part(p, 0, len(p.item_costs)) for p in prepared])
    for task, together in zip(tasks, fused, strict=True):
        [alone] = run(sparse, task)
        for a, b in zip(together, alone, strict=True):
            assert np.array_equal(a["sparse"].indices, b.indices)
            np.testing.assert_allclose(a["sparse"].values, b.values, atol=TOL, rtol=0)


def test_costs_are_token_counts(sparse: SparseEncoderAdapter) -> None:
    prepared = sparse.prepare(EncodeTask(texts=TEXTS))
    tokenizer = sparse.tokenizer
    assert prepared.item_costs == [len(tokenizer("passage: " + t)["input_ids"]) for t in TEXTS]
    assert prepared.input_tokens == sum(prepared.item_costs)


def test_overflow(sparse_dir: Path) -> None:
    short = SparseEncoderAdapter.load(load_context(sparse_dir, max_sequence_length=8))
    long_text = "word " * 50
    with pytest.raises(InputTooLong):
        short.prepare(EncodeTask(texts=[long_text], overflow="error"))
    assert short.prepare(EncodeTask(texts=[long_text])).item_costs == [8]


def test_rejects_other_tasks(sparse: SparseEncoderAdapter) -> None:
    with pytest.raises(InvalidInput):
        sparse.prepare(ScoreTask(query="q", texts=["d"]))
