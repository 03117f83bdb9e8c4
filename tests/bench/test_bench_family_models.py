"""The bench heads of the retrieval families (sift_bench.workload.decoder_models and
m3_models): built with fixed seeds, so two builds are the same model, and served by their
adapter with the request the bench sends. Built smaller than MiniLM (the builders take the
width and depth) to keep the test quick; the bench builds them at MiniLM's size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sift_bench.run.ceiling import preparer
from sift_bench.workload import decoder_models, heads, m3_models
from sift_server.forward_io import Part
from sift_server.registry.catalog import Catalog
from sift_server.registry.loader import load_adapter

TEXTS = ["the search team wants its model served", "the capital of China is Beijing"]

BUILDERS: dict[str, tuple[Callable[..., Path], int]] = {
    # head: (its builder, a small width the builder takes)
    "decoder": (decoder_models.build_minilm_qwen3_embedder, 128),
    "llm-reranker": (decoder_models.build_minilm_qwen3_reranker, 128),
    "bge-m3": (m3_models.build_minilm_m3, 64),
}


def _weights(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in (".safetensors", ".pt")}


@pytest.mark.slow
@pytest.mark.parametrize("head", sorted(BUILDERS))
def test_a_head_is_the_same_model_every_build_and_its_adapter_answers_the_benchs_request(
    tmp_path: Path, head: str
) -> None:
    build, hidden = BUILDERS[head]
    first = build(tmp_path / "first", hidden=hidden, layers=1)
    second = build(tmp_path / "second", hidden=hidden, layers=1)
    assert _weights(first) and _weights(first) == _weights(second)

    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "head.yaml").write_text(heads.catalog_entry(head, first), encoding="utf-8")
    spec = heads._HEADS[head]
    adapter = load_adapter(
        Catalog.from_dirs([catalog]).get(f"bench/{spec.folder}"), 1, backend_override="torch", cache_dir=tmp_path
    )
    prepared = preparer(adapter, spec.request)(TEXTS)
    [answers] = adapter.forward([Part(prepared, 0, len(TEXTS))])
    assert len(answers) == len(TEXTS)
    if head == "decoder":
        vectors = np.stack(answers)
        assert vectors.shape == (2, hidden)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # the entry's normalize: true
    if head == "llm-reranker":
        assert all(0.0 < float(score) < 1.0 for score in answers)
    if head == "bge-m3":
        assert all({"dense", "sparse", "multivector"} <= set(answer) for answer in answers)
