"""GliClassAdapter: parity with the library's ``ZeroShotClassificationPipeline``,
batching isolation (also across thresholds, modes and instructions), request
validation, costs and length handling, on a tiny random uni-encoder GLiClass."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.base import ExtractTask, FewShotExample, Part, ScoreTask, TaskInput
from sift_server.adapters.gliclass.adapter import GliClassAdapter, examples_prompt
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context

TOL = 1e-5
LABELS = ["positive", "negative", "finance", "sports"]
TEXTS = [
    "I loved this movie, the actors were great.",
    "The stock market crashed today and investors panicked.",
    "The match ended two to one after extra time.",
    "x",
]
LONG_TEXT = " ".join(["The quarterly report was long and detailed."] * 20)


def run(adapter: GliClassAdapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def ranked(predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(predictions, key=lambda p: -p["score"])


def assert_same_classes(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [c["label"] for c in actual] == [c["label"] for c in expected]
    for a, e in zip(actual, expected, strict=True):
        assert abs(a["score"] - e["score"]) <= TOL


@pytest.fixture(scope="module")
def reference(gliclass_dir: Path) -> Any:
    """The library's own pipeline over an independently loaded model."""
    from gliclass import GLiClassModel, ZeroShotClassificationPipeline
    from transformers import AutoTokenizer

    model = GLiClassModel.from_pretrained(gliclass_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(gliclass_dir, local_files_only=True)
    return ZeroShotClassificationPipeline(model, tokenizer, max_length=512, device="cpu", progress_bar=False)


def test_info(gliclass: GliClassAdapter) -> None:
    assert gliclass.info.tasks == frozenset({"extract"})
    assert gliclass.info.outputs == ("classifications",)
    assert gliclass.info.max_sequence_length == 512


def test_multi_label_matches_the_pipeline(gliclass: GliClassAdapter, reference: Any) -> None:
    [items] = run(gliclass, ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.0, multi_label=True))
    for text, item in zip(TEXTS, items, strict=True):
        [expected] = reference(text, LABELS, threshold=0.0, classification_type="multi-label")
        assert len(expected) == len(LABELS)  # threshold 0 keeps every class
        assert_same_classes(item["classifications"], ranked(expected))
        assert item["entities"] == item["relations"] == item["objects"] == []
        assert item["data"] == {}


def test_threshold_keeps_the_classes_over_it(gliclass: GliClassAdapter, reference: Any) -> None:
    [items] = run(gliclass, ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.25))
    kept = 0
    for text, item in zip(TEXTS, items, strict=True):
        [expected] = reference(text, LABELS, threshold=0.25)
        assert_same_classes(item["classifications"], ranked(expected))
        kept += len(expected)
    assert 0 < kept < len(TEXTS) * len(LABELS)  # the threshold really filtered


def all_scores(reference: Any, text: str, labels: list[str], **kwargs: Any) -> list[dict[str, Any]]:
    """Every label's score from the library, best first (its ``return_hierarchical`` map)."""
    [scores] = reference([text], [labels], threshold=0.0, return_hierarchical=True, **kwargs)
    return ranked([{"label": label, "score": score} for label, score in scores.items()])


def test_single_label_lists_every_label_by_softmax(gliclass: GliClassAdapter, reference: Any) -> None:
    task = ExtractTask(texts=TEXTS, labels=LABELS, classification_type="single-label")
    [items] = run(gliclass, task)
    for text, item in zip(TEXTS, items, strict=True):
        [top] = reference(text, LABELS, classification_type="single-label")
        expected = all_scores(reference, text, LABELS, classification_type="single-label")
        assert_same_classes(item["classifications"], expected)
        assert abs(sum(c["score"] for c in item["classifications"]) - 1.0) <= TOL  # a softmax
        assert_same_classes(item["classifications"][:1], top)


def test_single_label_threshold_filters(gliclass: GliClassAdapter, reference: Any) -> None:
    [items] = run(gliclass, ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.25, multi_label=False))
    kept = 0
    for text, item in zip(TEXTS, items, strict=True):
        expected = [
            c for c in all_scores(reference, text, LABELS, classification_type="single-label") if c["score"] >= 0.25
        ]
        assert_same_classes(item["classifications"], expected)
        kept += len(expected)
    assert 0 < kept < len(TEXTS) * len(LABELS)


def test_request_mode_overrides_the_catalog(gliclass_dir: Path, reference: Any) -> None:
    single = GliClassAdapter.load(load_context(gliclass_dir, classification_type="single-label"))
    [[item]] = run(single, ExtractTask(texts=TEXTS[:1], labels=LABELS, classification_type="multi-label"))
    assert_same_classes(item["classifications"], all_scores(reference, TEXTS[0], LABELS))
    [[item]] = run(single, ExtractTask(texts=TEXTS[:1], labels=LABELS))
    expected = all_scores(reference, TEXTS[0], LABELS, classification_type="single-label")
    assert_same_classes(item["classifications"], expected)


GROUPS = (("sentiment", ("positive", "negative")), ("topic", ("finance", "sports", "cinema")))


def test_label_groups_score_each_group_alone(gliclass: GliClassAdapter, reference: Any) -> None:
    for mode in ("single-label", "multi-label"):
        [items] = run(gliclass, ExtractTask(texts=TEXTS[:3], labels=(), label_groups=GROUPS, classification_type=mode))
        for text, item in zip(TEXTS[:3], items, strict=True):
            expected = []
            for group, labels in GROUPS:
                for c in all_scores(reference, text, list(labels), classification_type=mode):
                    expected.append({"label": f"{group}.{c['label']}", "score": c["score"]})
            assert_same_classes(item["classifications"], ranked(expected))
            assert set(item["data"]) == {"sentiment", "topic"}
            for group, labels in GROUPS:
                data = item["data"][group]
                probabilities = {
                    c["label"]: c["score"] for c in all_scores(reference, text, list(labels), classification_type=mode)
                }
                assert list(data["probabilities"]) == list(labels)
                for label in labels:
                    assert abs(data["probabilities"][label] - probabilities[label]) <= TOL
                if mode == "single-label":
                    p = list(probabilities.values())
                    entropy = -sum(x * math.log(x) for x in p)
                    assert data["type"] == "choice"
                    assert data["choice"] == max(probabilities, key=probabilities.__getitem__)
                    assert abs(data["confidence"] - (1 - entropy / math.log(len(p)))) <= TOL
                else:
                    # No threshold in the request: data lists labels at or over 0.5.
                    assert data["labels"] == [label for label in labels if data["probabilities"][label] >= 0.5]


def test_label_group_data_uses_the_request_threshold(gliclass: GliClassAdapter) -> None:
    task = ExtractTask(texts=TEXTS, labels=(), label_groups=GROUPS, multi_label=True, threshold=0.3)
    [items] = run(gliclass, task)
    for item in items:
        for group, labels in GROUPS:
            data = item["data"][group]
            assert data["labels"] == [label for label in labels if data["probabilities"][label] >= 0.3]
        assert all(c["score"] >= 0.3 for c in item["classifications"])


def test_examples_are_the_pipeline_examples(gliclass: GliClassAdapter, reference: Any) -> None:
    shots = (
        FewShotExample("Great acting and a moving story.", ("positive",)),
        FewShotExample("Stocks fell.", ("finance", "negative")),
    )
    task = ExtractTask(texts=TEXTS[:2], labels=LABELS, instruction="Classify:", examples=shots)
    [items] = run(gliclass, task)
    as_dicts = [{"text": e.text, "labels": list(e.labels)} for e in shots]
    differs = False
    for text, item in zip(TEXTS[:2], items, strict=True):
        expected = all_scores(reference, text, LABELS, prompt="Classify:", examples=[as_dicts])
        assert_same_classes(item["classifications"], expected)
        plain = all_scores(reference, text, LABELS, prompt="Classify:")
        by_label = {c["label"]: c["score"] for c in plain}
        differs = differs or any(abs(c["score"] - by_label[c["label"]]) > 1e-4 for c in expected)
    assert differs  # the examples really reached the model


def test_examples_prompt_is_the_pipelines_own(gliclass: GliClassAdapter) -> None:
    # The adapter calls gliclass's public formatter with the pipeline's tokens instead of
    # the pipeline's private method; the two must write the same text (a library upgrade
    # that changes either shows here).
    pipe = gliclass.pipeline.pipe
    shots = [{"text": "A great phone.", "labels": ["positive"]}, {"text": "Slow.", "labels": ["negative", "tech"]}]
    written = examples_prompt(pipe, shots)
    assert written == pipe._format_examples_for_input(shots)
    assert "A great phone." in written and written.endswith(pipe.sep_token)


def test_usage_counts_documents_not_label_prompts(gliclass: GliClassAdapter) -> None:
    tokenizer = gliclass.pipeline.pipe.tokenizer
    doc_tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
    few = gliclass.prepare(ExtractTask(texts=TEXTS, labels=LABELS[:1]))
    many = gliclass.prepare(ExtractTask(texts=TEXTS, labels=LABELS))
    assert few.input_tokens == many.input_tokens == doc_tokens
    assert sum(few.item_costs) < sum(many.item_costs)  # batch cost still counts the label prompt
    prompt_tokens = len(tokenizer("Topic?", add_special_tokens=False)["input_ids"])
    with_prompt = gliclass.prepare(ExtractTask(texts=TEXTS, labels=LABELS, instruction="Topic?"))
    assert with_prompt.input_tokens == doc_tokens + len(TEXTS) * prompt_tokens
    grouped = gliclass.prepare(ExtractTask(texts=TEXTS, labels=(), label_groups=GROUPS))
    assert grouped.input_tokens == doc_tokens


def test_instruction_is_the_pipeline_prompt(gliclass: GliClassAdapter, reference: Any) -> None:
    instruction = "Classify the sentiment and topic of this review:"
    task = ExtractTask(texts=TEXTS[:2], labels=LABELS, threshold=0.0, instruction=instruction)
    [items] = run(gliclass, task)
    for text, item in zip(TEXTS[:2], items, strict=True):
        [expected] = reference(text, LABELS, threshold=0.0, prompt=instruction)
        assert_same_classes(item["classifications"], ranked(expected))


def test_classifications_are_sorted_native_floats(gliclass: GliClassAdapter) -> None:
    [items] = run(gliclass, ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.0))
    for item in items:
        scores = [c["score"] for c in item["classifications"]]
        assert scores == sorted(scores, reverse=True)
        assert all(type(s) is float for s in scores)
        assert all(list(c) == ["label", "score"] for c in item["classifications"])


def test_fused_forward_equals_separate_forwards(gliclass: GliClassAdapter) -> None:
    # Same labels, different per-request settings: these fuse into one call.
    shots = (FewShotExample("Goal!", ("sports",)),)
    tasks = [
        ExtractTask(texts=TEXTS[:2], labels=LABELS, threshold=0.0),
        ExtractTask(texts=[TEXTS[2]], labels=LABELS, multi_label=False),
        ExtractTask(texts=[TEXTS[3], LONG_TEXT], labels=LABELS, threshold=0.3, instruction="Topic?"),
        ExtractTask(texts=[TEXTS[1]], labels=LABELS, classification_type="single-label", examples=shots),
        ExtractTask(texts=[TEXTS[0]], labels=["happy", "sad"], threshold=0.0),  # another label set
    ]
    prepared = [gliclass.prepare(t) for t in tasks]
    assert len({p.compat_key for p in prepared[:4]}) == 1
    fused = gliclass.forward([Part(p, 0, len(p.item_costs)) for p in prepared])
    assert [len(x) for x in fused] == [len(t.texts) for t in tasks]
    for task, together in zip(tasks, fused, strict=True):
        [alone] = run(gliclass, task)
        for a, b in zip(together, alone, strict=True):
            assert_same_classes(a["classifications"], b["classifications"])


def test_split_request(gliclass: GliClassAdapter) -> None:
    prepared = gliclass.prepare(ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.0))
    [whole] = gliclass.forward([Part(prepared, 0, 4)])
    head, tail = gliclass.forward([Part(prepared, 0, 3), Part(prepared, 3, 4)])
    for a, b in zip(head + tail, whole, strict=True):
        assert_same_classes(a["classifications"], b["classifications"])


def test_compat_key_is_the_label_set(gliclass: GliClassAdapter) -> None:
    def key(**kwargs: Any) -> object:
        return gliclass.prepare(ExtractTask(texts=["x"], **{"labels": LABELS, **kwargs})).compat_key

    assert key() == key(threshold=0.9) == key(multi_label=False) == key(instruction="Topic?")
    assert key() == key(classification_type="single-label") == key(examples=(FewShotExample("a", ("sports",)),))
    assert key() != key(labels=LABELS[:2])
    assert key(labels=(), label_groups=GROUPS) != key()
    assert key() != key(labels=list(reversed(LABELS)))  # order changes the model input


def test_costs_are_rendered_input_tokens(gliclass: GliClassAdapter) -> None:
    prepared = gliclass.prepare(ExtractTask(texts=TEXTS, labels=LABELS))
    tokenizer = gliclass.pipeline.pipe.tokenizer
    expected = [len(tokenizer(gliclass.pipeline.pipe.prepare_input(t, LABELS))["input_ids"]) for t in TEXTS]
    assert prepared.item_costs == expected
    assert all(type(c) is int and c > 0 for c in prepared.item_costs)
    grouped = gliclass.prepare(ExtractTask(texts=TEXTS, labels=(), label_groups=GROUPS))
    pipe = gliclass.pipeline.pipe
    assert grouped.item_costs == [
        sum(len(tokenizer(pipe.prepare_input(t, list(labels)))["input_ids"]) for _, labels in GROUPS) for t in TEXTS
    ]


@pytest.mark.parametrize(
    ("task", "error"),
    [
        (ExtractTask(texts=["x"], labels=[]), InvalidInput),
        (ExtractTask(texts=[], labels=LABELS), InvalidInput),
        (ExtractTask(texts=["x"], labels=LABELS, flat_ner=True), InvalidInput),
        (ScoreTask(query="q", texts=["x"]), InvalidInput),
    ],
)
def test_invalid_requests(gliclass: GliClassAdapter, task: TaskInput, error: type[Exception]) -> None:
    with pytest.raises(error):
        gliclass.prepare(task)


@pytest.fixture(scope="module")
def short_gliclass(gliclass_dir: Path) -> GliClassAdapter:
    return GliClassAdapter.load(load_context(gliclass_dir, max_sequence_length=24, threshold=0.0))


def test_overflow_error(short_gliclass: GliClassAdapter) -> None:
    with pytest.raises(InputTooLong):
        short_gliclass.prepare(ExtractTask(texts=["short", LONG_TEXT], labels=LABELS, overflow="error"))


def test_truncation_cuts_the_text_and_keeps_every_label(short_gliclass: GliClassAdapter) -> None:
    prepared = short_gliclass.prepare(ExtractTask(texts=[LONG_TEXT], labels=LABELS))
    [fitted] = prepared.payload.texts
    assert LONG_TEXT.startswith(fitted) and len(fitted) < len(LONG_TEXT)
    assert 0 < prepared.item_costs[0] <= 24
    [[item]] = short_gliclass.forward([Part(prepared, 0, 1)])
    # Threshold 0: every label must still be scored, so none was truncated away.
    assert sorted(c["label"] for c in item["classifications"]) == sorted(LABELS)


def test_labels_that_fill_the_limit_are_rejected(short_gliclass: GliClassAdapter) -> None:
    many = [f"category number {i}" for i in range(8)]
    with pytest.raises(InputTooLong):
        short_gliclass.prepare(ExtractTask(texts=["hello"], labels=many))


@pytest.mark.parametrize("options", [{"threshold": "high"}, {"classification_type": "both"}, {"multi_label": "no"}])
def test_bad_catalog_options_fail_the_load(gliclass_dir: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GliClassAdapter.load(load_context(gliclass_dir, **options))
