"""NliAdapter: parity with transformers' zero-shot pipeline run in process, the
entailment and contradiction classes found by name (never by position), options,
fused forwards and length handling, on a tiny random BERT NLI head."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.nli import NliAdapter, NliClasses, hypothesis_template, nli_classes
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.fixtures.tiny_models import NLI_LABELS, build_tiny_nli

TOL = 1e-5
LABELS = ["positive", "finance", "sports", "weather"]
TEXTS = [
    "I loved this movie, the actors were great.",
    "The stock market crashed today and investors panicked.",
    "x",
]
TEMPLATE = "This text is about {}."


@pytest.fixture(scope="module")
def nli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_nli(tmp_path_factory.mktemp("nli"))


@pytest.fixture(scope="module")
def nli(nli_dir: Path) -> NliAdapter:
    return NliAdapter.load(load_context(nli_dir))


@pytest.fixture(scope="module")
def pipeline(nli_dir: Path) -> Any:
    from transformers import pipeline

    return pipeline("zero-shot-classification", model=str(nli_dir), device=-1)


def run(adapter: NliAdapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def classes(item: dict[str, Any]) -> list[tuple[str, float]]:
    return [(c["label"], c["score"]) for c in item["classifications"]]


def assert_close(actual: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [label for label, _ in actual] == [label for label, _ in expected]
    for (_, a), (_, e) in zip(actual, expected, strict=True):
        assert abs(a - e) <= TOL


def test_info(nli: NliAdapter) -> None:
    assert nli.info.tasks == frozenset({"extract"})
    assert nli.info.outputs == ("classifications",)
    assert nli.classes == NliClasses(entailment=2, contradiction=0)


@pytest.mark.parametrize("multi_label", [False, True])
def test_matches_the_pipeline(nli: NliAdapter, pipeline: Any, multi_label: bool) -> None:
    got = run(nli, ExtractTask(texts=TEXTS, labels=LABELS, multi_label=multi_label))[0]
    expected = pipeline(TEXTS, candidate_labels=LABELS, hypothesis_template=TEMPLATE, multi_label=multi_label)
    for item, reference in zip(got, expected, strict=True):
        assert_close(classes(item), list(zip(reference["labels"], reference["scores"], strict=True)))
        assert item["entities"] == [] and item["data"] == {}
    if not multi_label:
        assert all(abs(sum(score for _, score in classes(item)) - 1.0) < 1e-6 for item in got)


def test_one_label_is_scored_on_its_own(nli: NliAdapter, pipeline: Any) -> None:
    # A softmax over one label would always be 1: the pipeline scores it against contradiction.
    (item,) = run(nli, ExtractTask(texts=TEXTS[:1], labels=["sports"]))[0]
    expected = pipeline(TEXTS[0], candidate_labels=["sports"], hypothesis_template=TEMPLATE)
    assert_close(classes(item), [("sports", expected["scores"][0])])
    assert classes(item)[0][1] < 0.99


def test_template_and_classification_type_options(nli: NliAdapter, pipeline: Any) -> None:
    template = "The topic is {}!"
    task = ExtractTask(
        texts=TEXTS[:2], labels=LABELS, classification_type="multi-label", options={"hypothesis_template": template}
    )
    got = run(nli, task)[0]
    expected = pipeline(TEXTS[:2], candidate_labels=LABELS, hypothesis_template=template, multi_label=True)
    for item, reference in zip(got, expected, strict=True):
        assert_close(classes(item), list(zip(reference["labels"], reference["scores"], strict=True)))
    default = run(nli, ExtractTask(texts=TEXTS[:1], labels=LABELS, multi_label=True))[0][0]
    assert classes(default) != classes(got[0])


@pytest.mark.parametrize("template", ["no placeholder", "{} and {}", "{name}", "{", 3, "", "{0} {1}"])
def test_bad_templates_are_400(nli: NliAdapter, template: object) -> None:
    with pytest.raises(InvalidInput, match="hypothesis_template"):
        nli.prepare(ExtractTask(texts=TEXTS, labels=LABELS, options={"hypothesis_template": template}))


def test_good_templates() -> None:
    assert hypothesis_template("{} it is") == "{} it is"
    assert hypothesis_template("{{literal}} {}") == "{{literal}} {}"
    assert hypothesis_template("about {0}.") == "about {0}."


def test_threshold_leaves_out_low_labels(nli: NliAdapter) -> None:
    (full,) = run(nli, ExtractTask(texts=TEXTS[:1], labels=LABELS))[0]
    cut = sorted(score for _, score in classes(full))[1]
    (item,) = run(nli, ExtractTask(texts=TEXTS[:1], labels=LABELS, threshold=cut))[0]
    assert classes(item) == [(label, score) for label, score in classes(full) if score >= cut]
    assert len(classes(item)) == len(LABELS) - 1


def test_fused_requests_equal_each_alone(nli: NliAdapter) -> None:
    tasks = [
        ExtractTask(texts=TEXTS, labels=LABELS),
        ExtractTask(texts=TEXTS[:1], labels=["sports"], multi_label=True),
        ExtractTask(texts=TEXTS[1:], labels=LABELS[::-1], options={"hypothesis_template": "It is {}."}),
    ]
    fused = run(nli, *tasks)
    for task, together in zip(tasks, fused, strict=True):
        alone = run(nli, task)[0]
        for a, b in zip(together, alone, strict=True):
            assert_close(classes(a), classes(b))
    # Items cut anywhere inside a request (the engine splits large ones).
    prepared = nli.prepare(tasks[0])
    halves = nli.forward([Part(prepared, 0, 1), Part(prepared, 1, 3)])
    assert [classes(i) for i in halves[0] + halves[1]] == [classes(i) for i in fused[0]]


def test_costs_and_usage_count_every_pair(nli: NliAdapter) -> None:
    prepared = nli.prepare(ExtractTask(texts=TEXTS, labels=LABELS))
    pairs = nli.tokenizer([t for t in TEXTS for _ in LABELS], [TEMPLATE.format(label) for label in LABELS] * 3)
    lengths = [len(ids) for ids in pairs["input_ids"]]
    assert prepared.item_costs == [sum(lengths[i * 4 : i * 4 + 4]) for i in range(3)]
    assert prepared.input_tokens == sum(lengths)


def test_long_texts_are_cut_or_refused(nli: NliAdapter) -> None:
    long_text = "word " * 2000
    prepared = nli.prepare(ExtractTask(texts=[long_text], labels=LABELS))
    assert prepared.item_costs == [nli.max_length * len(LABELS)]
    (item,) = nli.forward([Part(prepared, 0, 1)])[0]
    assert len(item["classifications"]) == len(LABELS)
    with pytest.raises(InputTooLong) as raised:
        nli.prepare(ExtractTask(texts=["short", long_text], labels=LABELS, overflow="error"))
    assert raised.value.extra["index"] == 1


def test_needs_labels_and_refuses_other_models_options(nli: NliAdapter) -> None:
    with pytest.raises(InvalidInput, match="labels"):
        nli.prepare(ExtractTask(texts=TEXTS, labels=[]))
    with pytest.raises(InvalidInput, match="flat_ner"):
        nli.prepare(ExtractTask(texts=TEXTS, labels=LABELS, flat_ner=True))
    with pytest.raises(InvalidInput, match="label_groups"):
        nli.prepare(ExtractTask(texts=TEXTS, labels=[], label_groups=(("g", ("a", "b")),)))


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("contradiction", "neutral", "entailment"), NliClasses(2, 0)),
        (("entailment", "neutral", "contradiction"), NliClasses(0, 2)),
        (("neutral", "ENTAILMENT", "Contradiction"), NliClasses(1, 2)),
        (("entailment", "not_entailment"), NliClasses(0, 1)),
        (("not-entailment", "entailment"), NliClasses(1, 0)),
        (("entailment", "other"), NliClasses(0, 1)),
    ],
)
def test_classes_by_name(names: tuple[str, ...], expected: NliClasses) -> None:
    assert nli_classes(dict(enumerate(names))) == expected


@pytest.mark.parametrize(
    "names", [("LABEL_0", "LABEL_1", "LABEL_2"), ("entailment", "neutral", "other"), ("entailment", "entailment")]
)
def test_a_head_without_named_classes_fails_its_load(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="id2label"):
        nli_classes(dict(enumerate(names)))


def test_answers_do_not_depend_on_the_heads_class_order(nli: NliAdapter, nli_dir: Path, tmp_path: Path) -> None:
    """The same network with its output classes stored in another order (and named
    accordingly) answers the same: classes are found by name. Entailment second and
    contradiction last is an order where the pipeline's positional rule would take
    neutral for contradiction."""
    from transformers import BertForSequenceClassification

    order = [1, 2, 0]  # new class i is old class order[i]: neutral, entailment, contradiction
    model = BertForSequenceClassification.from_pretrained(nli_dir, local_files_only=True)
    with torch.no_grad():
        model.classifier.weight.copy_(model.classifier.weight[order])
        model.classifier.bias.copy_(model.classifier.bias[order])
    names = [NLI_LABELS[i] for i in order]
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {name: i for i, name in enumerate(names)}
    permuted_dir = tmp_path / "permuted"
    model.save_pretrained(permuted_dir)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (permuted_dir / name).write_bytes((nli_dir / name).read_bytes())
    permuted = NliAdapter.load(load_context(permuted_dir))
    assert permuted.classes == NliClasses(entailment=1, contradiction=2)
    for multi_label in (False, True):
        task = ExtractTask(texts=TEXTS, labels=LABELS, multi_label=multi_label)
        for a, b in zip(run(permuted, task)[0], run(nli, task)[0], strict=True):
            assert_close(classes(a), classes(b))


def test_catalog_options_are_checked_at_load(nli_dir: Path) -> None:
    with pytest.raises(ValueError, match="hypothesis_template"):
        NliAdapter.load(load_context(nli_dir, hypothesis_template="no placeholder"))
    with pytest.raises(ValueError, match="multi_label"):
        NliAdapter.load(load_context(nli_dir, multi_label="yes"))
    multi = NliAdapter.load(load_context(nli_dir, multi_label=True, hypothesis_template="It is {}."))
    task = ExtractTask(texts=TEXTS[:1], labels=LABELS)
    explicit = ExtractTask(
        texts=TEXTS[:1], labels=LABELS, multi_label=True, options={"hypothesis_template": "It is {}."}
    )
    nli_default = NliAdapter.load(load_context(nli_dir))
    assert classes(run(multi, task)[0][0]) == classes(run(nli_default, explicit)[0][0])


async def test_extract_route_end_to_end(nli_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: nli\nsource: {{path: {nli_dir}}}\ntasks: [extract]\n"
    url, json_only = "/v1/extract/tiny/nli", {"Accept": "application/json"}
    body = {"items": [{"id": "a", "text": TEXTS[0]}], "params": {"labels": LABELS, "options": {"multi_label": True}}}
    async with serving_one_entry(tmp_path, "tiny/nli", entry) as client:
        answer = await client.post(url, headers=json_only, json=body)
        schema = await client.post(
            url, headers=json_only, json={"items": [{"text": "x"}], "params": {"output_schema": {"type": "object"}}}
        )
        template = await client.post(
            url,
            headers=json_only,
            json={"items": [{"text": "x"}], "params": {"labels": LABELS, "options": {"hypothesis_template": "no"}}},
        )
    assert answer.status_code == 200, answer.text
    (item,) = answer.json()["items"]
    assert item["id"] == "a" and len(item["classifications"]) == len(LABELS)
    assert answer.json()["usage"]["input_tokens"] > 0
    assert schema.status_code == 400 and "output_schema" in schema.text
    assert template.status_code == 400 and template.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
