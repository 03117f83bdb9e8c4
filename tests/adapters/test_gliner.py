"""GlinerAdapter: parity with ``GLiNER.predict_entities``, batching isolation,
output shape, request validation, costs and length handling, on a tiny random
GLiNER (uni-encoder, span mode) over a tiny BERT backbone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.base import ExtractTask, FewShotExample, Part, ScoreTask, TaskInput
from sift_server.adapters.gliner.adapter import GlinerAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context

TOL = 1e-5
THRESHOLD = 0.3  # random weights score spans near 0.48; 0.3 keeps plenty of them
LABELS = ["person", "location", "organization"]
TEXTS = [
    "Ada Lovelace worked with Charles Babbage in London.",
    "Paris is the capital of France and home to the Louvre museum.",
    "Zoë met the CEO of Acme-Corp in São Paulo, Brazil!",
    "hello",
]
LONG_TEXT = " ".join(f"word{i}" for i in range(100))  # more words than max_len=64


def run(adapter: GlinerAdapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def spans(item: dict[str, Any]) -> list[tuple[int, int, str, str]]:
    return [(e["start"], e["end"], e["label"], e["text"]) for e in item["entities"]]


def assert_same_entities(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [(e["start"], e["end"], e["label"], e["text"]) for e in actual] == [
        (e["start"], e["end"], e["label"], e["text"]) for e in expected
    ]
    for a, e in zip(actual, expected, strict=True):
        assert abs(a["score"] - e["score"]) <= TOL


@pytest.fixture(scope="module")
def reference(gliner_dir: Path) -> Any:
    """An independent library instance loaded from the same folder."""
    from gliner import GLiNER

    return GLiNER.from_pretrained(str(gliner_dir), local_files_only=True, map_location="cpu")


def test_info(gliner: GlinerAdapter) -> None:
    assert gliner.info.tasks == frozenset({"extract"})
    assert gliner.info.outputs == ("entities",)
    assert gliner.info.max_sequence_length == 512


def test_matches_predict_entities_per_text(gliner: GlinerAdapter, reference: Any) -> None:
    [items] = run(gliner, ExtractTask(texts=TEXTS, labels=LABELS, threshold=THRESHOLD))
    assert len(items) == len(TEXTS)
    found = 0
    for text, item in zip(TEXTS, items, strict=True):
        expected = reference.predict_entities(text, LABELS, threshold=THRESHOLD, flat_ner=True)
        assert_same_entities(item["entities"], expected)
        found += len(expected)
    assert found >= len(TEXTS)  # not vacuous: the reference found entities


def test_multi_label_and_nested_settings_match_the_library(gliner: GlinerAdapter, reference: Any) -> None:
    task = ExtractTask(texts=TEXTS[:2], labels=LABELS, threshold=0.45, multi_label=True, flat_ner=False)
    [items] = run(gliner, task)
    found = 0
    for text, item in zip(TEXTS[:2], items, strict=True):
        expected = reference.predict_entities(text, LABELS, threshold=0.45, flat_ner=False, multi_label=True)
        assert_same_entities(item["entities"], expected)
        found += len(expected)
    assert found > 0


def test_entity_shape_is_the_wire_shape(gliner: GlinerAdapter) -> None:
    [items] = run(gliner, ExtractTask(texts=TEXTS[:1], labels=LABELS))  # catalog default threshold 0.3
    item = items[0]
    assert item["relations"] == item["classifications"] == item["objects"] == []
    assert item["data"] == {}
    assert item["entities"]
    for entity in item["entities"]:
        assert list(entity) == ["text", "label", "score", "start", "end", "bbox"]
        assert type(entity["score"]) is float and type(entity["start"]) is int and type(entity["end"]) is int
        assert entity["bbox"] is None
        assert TEXTS[0][entity["start"] : entity["end"]] == entity["text"]


def test_fused_forward_equals_separate_forwards(gliner: GlinerAdapter) -> None:
    tasks = [
        ExtractTask(texts=TEXTS[:2], labels=LABELS, threshold=THRESHOLD),
        ExtractTask(texts=[TEXTS[2]], labels=LABELS, threshold=THRESHOLD),
        ExtractTask(texts=[TEXTS[3], TEXTS[0], "   "], labels=LABELS, threshold=THRESHOLD),
    ]
    fused = run(gliner, *tasks)
    assert [len(x) for x in fused] == [len(t.texts) for t in tasks]
    for task, together in zip(tasks, fused, strict=True):
        [alone] = run(gliner, task)
        for a, b in zip(together, alone, strict=True):
            assert_same_entities(a["entities"], b["entities"])


def test_parts_with_different_settings_never_mix(gliner: GlinerAdapter) -> None:
    low = gliner.prepare(ExtractTask(texts=TEXTS[:1], labels=LABELS, threshold=0.3))
    other = gliner.prepare(ExtractTask(texts=TEXTS[:1], labels=["city"], threshold=0.3))
    both = gliner.forward([Part(low, 0, 1), Part(other, 0, 1)])
    assert both[0] == gliner.forward([Part(low, 0, 1)])[0]
    assert both[1] == gliner.forward([Part(other, 0, 1)])[0]
    assert {e["label"] for e in both[1][0]["entities"]} <= {"city"}


def test_split_request(gliner: GlinerAdapter) -> None:
    prepared = gliner.prepare(ExtractTask(texts=TEXTS, labels=LABELS, threshold=THRESHOLD))
    [whole] = gliner.forward([Part(prepared, 0, 4)])
    head, tail = gliner.forward([Part(prepared, 0, 1), Part(prepared, 1, 4)])
    for a, b in zip(head + tail, whole, strict=True):
        assert_same_entities(a["entities"], b["entities"])


def test_compat_keys_separate_inference_settings(gliner: GlinerAdapter) -> None:
    def key(**kwargs: Any) -> object:
        return gliner.prepare(ExtractTask(texts=["x"], **{"labels": LABELS, **kwargs})).compat_key

    assert key() == key()
    assert key() != key(labels=["person"])
    assert key() != key(threshold=0.9)
    assert key() != key(multi_label=True)
    assert key() != key(flat_ner=False)
    assert key(flat_ner=True) == key()  # the catalog default, spelled out


def test_costs_are_prompt_plus_text_tokens(gliner: GlinerAdapter) -> None:
    one_label = gliner.prepare(ExtractTask(texts=TEXTS, labels=["person"]))
    three_labels = gliner.prepare(ExtractTask(texts=TEXTS, labels=LABELS))
    for cost in one_label.item_costs + three_labels.item_costs:
        assert type(cost) is int and cost > 0
    # Every extra label adds its marker and word pieces to every item.
    assert all(b > a for a, b in zip(one_label.item_costs, three_labels.item_costs, strict=True))
    assert three_labels.input_tokens == sum(three_labels.item_costs)


@pytest.mark.parametrize(
    ("task", "error"),
    [
        (ExtractTask(texts=["x"], labels=[]), InvalidInput),
        (ExtractTask(texts=[], labels=["person"]), InvalidInput),
        (ExtractTask(texts=["x"], labels=(), label_groups=(("g", ("person",)),)), InvalidInput),
        (ExtractTask(texts=["x"], labels=["person"], classification_type="single-label"), InvalidInput),
        (ExtractTask(texts=["x"], labels=["person"], examples=(FewShotExample("Ada", ("person",)),)), InvalidInput),
        (ScoreTask(query="q", texts=["x"]), InvalidInput),
        (ExtractTask(texts=[LONG_TEXT], labels=["person"], overflow="error"), InputTooLong),
    ],
)
def test_invalid_requests(gliner: GlinerAdapter, task: TaskInput, error: type[Exception]) -> None:
    with pytest.raises(error):
        gliner.prepare(task)


def test_too_many_words_are_cut_on_a_word_boundary(gliner: GlinerAdapter) -> None:
    prepared = gliner.prepare(ExtractTask(texts=[LONG_TEXT], labels=LABELS, threshold=0.0))
    [fitted] = prepared.payload.texts
    assert LONG_TEXT.startswith(fitted) and fitted.endswith("word63")  # max_len = 64 words
    [[item]] = gliner.forward([Part(prepared, 0, 1)])
    assert item["entities"]
    assert all(LONG_TEXT[e["start"] : e["end"]] == e["text"] for e in item["entities"])
    assert max(e["end"] for e in item["entities"]) <= len(fitted)


@pytest.fixture(scope="module")
def short_gliner(gliner_dir: Path) -> GlinerAdapter:
    return GlinerAdapter.load(load_context(gliner_dir, max_sequence_length=32, threshold=0.0))


def test_token_limit_cuts_the_text_to_fit(short_gliner: GlinerAdapter) -> None:
    text = TEXTS[1] + " " + TEXTS[0]
    prepared = short_gliner.prepare(ExtractTask(texts=[text], labels=LABELS))
    [fitted] = prepared.payload.texts
    assert text.startswith(fitted) and len(fitted) < len(text)
    assert prepared.item_costs[0] <= 32
    # The cost is what the library will really run: prompt + kept words + specials.
    words = [w for w, _, _ in short_gliner.model.data_processor.words_splitter(fitted)]
    prompt = short_gliner.model.data_processor.prepare_inputs([[]], LABELS)[0][0]
    tokenizer = short_gliner.model.data_processor.transformer_tokenizer
    assert prepared.item_costs[0] == len(tokenizer([prompt + words], is_split_into_words=True)["input_ids"][0])
    with pytest.raises(InputTooLong):
        short_gliner.prepare(ExtractTask(texts=[text], labels=LABELS, overflow="error"))


def test_labels_that_fill_the_limit_are_rejected(short_gliner: GlinerAdapter) -> None:
    many = [f"category number {i}" for i in range(12)]
    with pytest.raises(InputTooLong):
        short_gliner.prepare(ExtractTask(texts=["Ada Lovelace"], labels=many))


def test_blank_text_has_no_entities(gliner: GlinerAdapter) -> None:
    prepared = gliner.prepare(ExtractTask(texts=["", "  "], labels=LABELS, threshold=0.0))
    assert all(c > 0 for c in prepared.item_costs)
    [items] = gliner.forward([Part(prepared, 0, 2)])
    assert [item["entities"] for item in items] == [[], []]


@pytest.mark.parametrize("options", [{"threshold": "high"}, {"threshold": 2}, {"flat_ner": "yes"}, {"multi_label": 1}])
def test_bad_catalog_options_fail_the_load(gliner_dir: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GlinerAdapter.load(load_context(gliner_dir, **options))
