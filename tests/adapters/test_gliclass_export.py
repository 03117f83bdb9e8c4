"""The exported GLiClass forward with the last encoder layer run at the read
positions only (``adapters/gliclass/export.py``): the same logits as the
library's forward in PyTorch, for every way the head picks its positions, and
which models qualify."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from sift_server.adapters.gliclass.export import PrunedForward, prunable, read_positions
from sift_server.adapters.gliclass.graph import GliClassGraph, _forward_module

LABELS = ["positive", "negative", "finance", "sports", "travel"]
TEXTS = [
    "x",
    "I loved this movie, the actors were great and the ending surprised everyone in the room.",
    "The stock market crashed today.",
]


@pytest.fixture(scope="module")
def model(gliclass_dir: Path) -> Iterator[tuple[Any, Any]]:
    from gliclass import GLiClassModel
    from transformers import AutoTokenizer

    classifier = GLiClassModel.from_pretrained(str(gliclass_dir), local_files_only=True).eval()
    yield classifier, AutoTokenizer.from_pretrained(str(gliclass_dir), local_files_only=True)


def batch(tokenizer: Any, label_counts: list[int]) -> list[torch.Tensor]:
    """Rendered texts with different label counts, so rows differ in slots and padding."""
    rendered = [
        "".join(f"<<LABEL>>{label}" for label in LABELS[:count]) + "<<SEP>>" + text
        for text, count in zip(TEXTS, label_counts, strict=True)
    ]
    encoded = tokenizer(rendered, padding=True, return_tensors="pt")
    return [encoded[name] for name in tokenizer.model_input_names]


def logits(module: torch.nn.Module, inputs: list[torch.Tensor], slots: int) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = module(*inputs, torch.zeros((inputs[0].shape[0], slots), dtype=torch.long))
    return out


@pytest.mark.parametrize("embed_class_token", [True, False])
@pytest.mark.parametrize("extract_text_features", [False, True])
def test_pruned_forward_gives_the_librarys_logits(
    model: tuple[Any, Any], embed_class_token: bool, extract_text_features: bool
) -> None:
    classifier, tokenizer = model
    classifier = copy.deepcopy(classifier)
    classifier.config.embed_class_token = embed_class_token
    classifier.config.extract_text_features = extract_text_features
    classifier.model.config = classifier.config
    inputs = batch(tokenizer, [5, 2, 3])
    names = tokenizer.model_input_names
    expected = logits(_forward_module(classifier, names).eval(), inputs, 5)
    got = logits(PrunedForward(classifier, names).eval(), inputs, 5)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_pruned_forward_reads_the_class_tokens_and_the_text_position(model: tuple[Any, Any]) -> None:
    classifier, tokenizer = model
    inputs = batch(tokenizer, [5, 2, 3])
    ids = inputs[tokenizer.model_input_names.index("input_ids")]
    positions = read_positions(ids, classifier.config, 5)
    marks = ids == classifier.config.class_token_index
    for row, count in enumerate([5, 2, 3]):
        expected = marks[row].nonzero().flatten().tolist()
        assert positions[row, 1 : 1 + count].tolist() == expected
        assert positions[row, 1 + count :].tolist() == [0] * (5 - count)  # empty slots
        assert positions[row, 0] == 0  # first-token pooling of the whole sequence


def test_only_first_token_heads_on_bert_qualify(model: tuple[Any, Any]) -> None:
    classifier, tokenizer = model
    names = tokenizer.model_input_names
    assert prunable(classifier.config, names)
    assert not prunable(classifier.config, ["input_ids"])  # no mask to attend with
    for field, value in [
        ("pooling_strategy", "avg"),
        ("class_token_pooling", "average"),
        ("scorer_type", "cross-attn"),
        ("use_lstm", True),
        ("layer_wise", True),
        ("encoder_layer_id", 2),
        ("use_calibrator", True),
        ("architecture_type", "bi-encoder"),
    ]:
        changed = copy.deepcopy(classifier.config)
        setattr(changed, field, value)
        assert not prunable(changed, names), field
    changed = copy.deepcopy(classifier.config)
    changed.encoder_config.model_type = "deberta-v2"
    assert not prunable(changed, names)


def test_the_pruned_export_has_its_own_cache_key(gliclass_dir: Path) -> None:
    full = GliClassGraph(gliclass_dir, ["input_ids", "attention_mask"])
    pruned = GliClassGraph(gliclass_dir, ["input_ids", "attention_mask"], prune_last_layer=True)
    assert full.key_parts() != pruned.key_parts()
