"""The tiny task models that the e2e group's ``server`` preloads beside the real default model:
sparse and ColBERT (test_hybrid), reranker, GLiNER and GLiClass (test_score_extract), GLiREL
(test_glirel), and an embedder and a cross-encoder with LoRAs (test_lora). One server for all of them costs one
interpreter start instead of four; each model keeps a name of its own, so no module sees
another's models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.pylate_reference import build_and_reference
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_glirel import build_tiny_glirel
from tests.fixtures.tiny_models import (
    build_tiny_backbone,
    build_tiny_cross_encoder,
    build_tiny_gliclass,
    build_tiny_gliner,
    build_tiny_lora,
    build_tiny_sparse_encoder,
    merge_lora,
)

SPARSE, COLBERT = "tiny/splade", "tiny/colbert"
RERANK, NER, CLASSIFY = "tiny/reranker", "tiny/gliner", "tiny/gliclass"
LORA_EMBED, LORA_RERANK = "tiny/lora-embedder", "tiny/lora-reranker"
RELATIONS = "tiny/glirel"
PRELOAD = (SPARSE, COLBERT, RERANK, NER, CLASSIFY, LORA_EMBED, LORA_RERANK, RELATIONS)
# The texts the ColBERT reference is computed for (test_hybrid sends the same).
HYBRID_TEXTS = ["What is the capital of France?", "Paris is the capital and largest city of France."]


@dataclass(frozen=True)
class TaskModels:
    """Where each tiny model was built, and the references the tests compare with."""

    folders: dict[str, Path]
    colbert_reference: dict[str, Any]


def catalog_entry(name: str, adapter: str, folder: Path, tasks: str, options: dict[str, object] | None = None) -> str:
    lines = [f"name: {name}", f"adapter: {adapter}", "source:", f"  path: {folder}", f"tasks: [{tasks}]"]
    if options:
        lines.append("options:")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in options.items()]
    return "\n".join(lines) + "\n"


def build_task_models(root: Path) -> TaskModels:
    embed = build_tiny_embedder(root / "lora-embed")
    rerank = build_tiny_cross_encoder(root / "lora-rerank")
    embed_lora = build_tiny_lora(embed, root / "lora-embed-lora", seed=5)
    rerank_lora = build_tiny_lora(rerank, root / "lora-rerank-lora", seed=6, sequence_classification=True)
    folders = {
        SPARSE: build_tiny_sparse_encoder(root / "splade", prompts={"query": "query: ", "document": ""}),
        COLBERT: root / "colbert",
        RERANK: build_tiny_cross_encoder(root / "reranker"),
        NER: build_tiny_gliner(root / "gliner"),
        CLASSIFY: build_tiny_gliclass(root / "gliclass"),
        RELATIONS: build_tiny_glirel(root / "glirel"),
        "lora-embed": embed,
        "lora-rerank": rerank,
        "lora-embed-lora": embed_lora,
        "lora-rerank-lora": rerank_lora,
        "lora-embed-merged": merge_lora(embed, embed_lora, root / "lora-embed-merged"),
        "lora-rerank-merged": merge_lora(
            rerank, rerank_lora, root / "lora-rerank-merged", sequence_classification=True
        ),
    }
    backbone = build_tiny_backbone(root / "colbert-backbone", seed=3)
    reference = build_and_reference(
        backbone, folders[COLBERT], HYBRID_TEXTS[:1], HYBRID_TEXTS, query_length=10, document_length=32
    )
    return TaskModels(folders, reference)


def write_task_catalog(catalog: Path, models: TaskModels) -> None:
    """The catalog entries of every task model (the folder must exist)."""
    folders = models.folders
    entries = {
        "splade": catalog_entry(SPARSE, "sparse-encoder", folders[SPARSE], "encode"),
        "colbert": catalog_entry(COLBERT, "colbert", folders[COLBERT], "encode, score"),
        "reranker": catalog_entry(RERANK, "cross-encoder", folders[RERANK], "score"),
        "gliner": catalog_entry(NER, "gliner", folders[NER], "extract", {"threshold": 0.3}),
        "gliclass": catalog_entry(CLASSIFY, "gliclass", folders[CLASSIFY], "extract", {"multi_label": False}),
        "glirel": catalog_entry(RELATIONS, "glirel", folders[RELATIONS], "extract", {"threshold": 0.3}),
        "lora-embedder": f"name: {LORA_EMBED}\nadapter: sentence-embedder\n"
        f"source: {{path: {folders['lora-embed']}}}\ntasks: [encode]\n"
        f"loras:\n  legal: {{path: {folders['lora-embed-lora']}}}\n  gone: {{path: {catalog / 'missing'}}}\n",
        "lora-reranker": f"name: {LORA_RERANK}\nadapter: cross-encoder\n"
        f"source: {{path: {folders['lora-rerank']}}}\ntasks: [score]\n"
        f"loras:\n  medical: {{path: {folders['lora-rerank-lora']}}}\n",
    }
    for name, text in entries.items():
        (catalog / f"{name}.yaml").write_text(text)
