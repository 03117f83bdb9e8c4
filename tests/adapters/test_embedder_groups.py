"""The embedder's forward by groups of similar length: every backend answers
what the one padded batch answers, and a loaded adapter carries the call cost
measured on its runner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sift_server.adapters.backends import buckets
from sift_server.adapters.base import EncodeTask, LoadContext, Part
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.fixtures.tiny_embedder import build_tiny_embedder

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "stars", "fall"]
# One to forty words: far apart enough that a free call splits them into many groups.
TEXTS = [" ".join(WORDS[i % len(WORDS)] for i in range(n)) for n in (1, 40, 3, 22, 9, 31, 2, 15)]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedder(tmp_path_factory.mktemp("tiny-embedder"), seed=5)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache for the module: the tiny embedder is exported once."""
    return tmp_path_factory.mktemp("groups-cache")


def load(path: Path, cache: Path, backend: str) -> SentenceEmbedderAdapter:
    return SentenceEmbedderAdapter.load(
        LoadContext(
            path=path,
            options={"device": "cpu"},
            max_sequence_length=None,
            torch_threads=1,
            backend=backend,
            precision="fp32",
            cache_dir=cache,
        )
    )


@pytest.mark.parametrize("backend", ["torch", "onnx", "openvino"])
def test_grouped_forward_answers_what_the_padded_batch_answers(embedder_dir: Path, cache: Path, backend: str) -> None:
    adapter = load(embedder_dir, cache, backend)
    prepared = adapter.prepare(EncodeTask(TEXTS))
    lengths = [len(row) for row in prepared.payload]
    parts = [Part(prepared, 0, 3), Part(prepared, 3, len(TEXTS))]

    adapter.call_cost_tokens = None
    whole = [np.stack(vectors) for vectors in adapter.forward(parts)]
    adapter.call_cost_tokens = 0
    assert len(buckets.plan(lengths, 0)) > 2
    grouped = [np.stack(vectors) for vectors in adapter.forward(parts)]

    assert [g.shape for g in grouped] == [(3, 32), (5, 32)]
    for got, want in zip(grouped, whole, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_load_measures_the_runner_s_call_cost(embedder_dir: Path, cache: Path) -> None:
    # Measured on every load (never read from the cache), so the module's export serves.
    adapter = load(embedder_dir, cache, "onnx")
    cost = adapter.call_cost_tokens
    assert isinstance(cost, int)
    assert 0 <= cost <= 4096
    assert adapter.info.runtime["call_cost_tokens"] == cost
