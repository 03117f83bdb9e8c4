"""Gliner2Adapter: parity with the gliner2 library run in process, the schema
field order independent of string hashing, fused requests, request validation and
length handling, on a tiny random GLiNER2; and the extract route end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.gliner2_extractor import Gliner2Adapter, OrderedSet, schema_fields
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.parity.cases import SCHEMA
from tests.fixtures.tiny_models import build_tiny_gliner2

TOL = 1e-5
TEXTS = ["Marie Curie was born in Warsaw and worked in Paris.", "Apple sold phones in Berlin in 2024."]
LABELS = ["person", "city"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gliner2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gliner2(tmp_path_factory.mktemp("gliner2"))


@pytest.fixture(scope="module")
def gliner2(gliner2_dir: Path) -> Gliner2Adapter:
    return Gliner2Adapter.load(load_context(gliner2_dir))


@pytest.fixture(scope="module")
def library(gliner2_dir: Path, gliner2: Gliner2Adapter) -> Any:
    """The library's own model, loaded independently (after the adapter, so with the same field order)."""
    from gliner2 import GLiNER2

    return GLiNER2.from_pretrained(str(gliner2_dir), map_location="cpu")


def run(adapter: Gliner2Adapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def test_entities_match_the_library(gliner2: Gliner2Adapter, library: Any) -> None:
    got = run(gliner2, ExtractTask(texts=TEXTS, labels=LABELS, threshold=0.51))[0]
    expected = library.batch_extract_entities(
        TEXTS, LABELS, threshold=0.51, include_confidence=True, include_spans=True, batch_size=2
    )
    for item, reference, text in zip(got, expected, TEXTS, strict=True):
        spans = sorted(
            (
                (s["start"], s["end"], label, s["confidence"])
                for label, found in reference["entities"].items()
                for s in found
            ),
            key=lambda span: span[0],
        )
        assert spans, "the case must have entities to compare"
        assert [(e["start"], e["end"], e["label"]) for e in item["entities"]] == [s[:3] for s in spans]
        assert all(abs(e["score"] - s[3]) <= TOL for e, s in zip(item["entities"], spans, strict=True))
        assert all(e["text"] == text[e["start"] : e["end"]] for e in item["entities"])


@pytest.mark.parametrize("multi_label", [False, True])
def test_classification_matches_the_library(gliner2: Gliner2Adapter, library: Any, multi_label: bool) -> None:
    labels = ["science", "business", "sports"]
    task = ExtractTask(
        texts=TEXTS, labels=labels, threshold=0.0, multi_label=multi_label, options={"classification_task": "topic"}
    )
    got = run(gliner2, task)[0]
    tasks = {"topic": {"labels": labels, "multi_label": multi_label, "cls_threshold": 0.0}}
    expected = library.batch_classify_text(TEXTS, tasks, threshold=0.0, include_confidence=True, batch_size=2)
    for item, reference in zip(got, expected, strict=True):
        found = reference["topic"] if multi_label else [reference["topic"]]
        found = sorted(found, key=lambda c: -c["confidence"])
        assert [c["label"] for c in item["classifications"]] == [c["label"] for c in found]
        assert len(found) == (3 if multi_label else 1)
        for c, r in zip(item["classifications"], found, strict=True):
            assert abs(c["score"] - r["confidence"]) <= TOL


def test_structure_matches_the_library(gliner2: Gliner2Adapter, library: Any) -> None:
    got = run(gliner2, ExtractTask(texts=TEXTS, labels=(), output_schema=SCHEMA))[0]
    expected = library.batch_extract_json(
        TEXTS, {"_sie_root": list(schema_fields(SCHEMA))}, threshold=0.5, batch_size=2
    )
    for item, reference in zip(got, expected, strict=True):
        assert item["data"] == reference["_sie_root"][0]
        assert set(item["data"]) == {"name", "places", "kind"}
        assert item["entities"] == [] and item["classifications"] == []


_ANSWER = """
import json, sys
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.gliner2_extractor import Gliner2Adapter
from tests.adapters.conftest import load_context
from pathlib import Path
adapter = Gliner2Adapter.load(load_context(Path(sys.argv[1])))
task = ExtractTask(texts=json.loads(sys.argv[2]), labels=(), output_schema=json.loads(sys.argv[3]))
prepared = adapter.prepare(task)
print(json.dumps([item["data"] for item in adapter.forward([Part(prepared, 0, len(task.texts))])[0]]))
"""


def _answer_in_process(gliner2_dir: Path, seed: int) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONHASHSEED": str(seed),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "server" / "src"), str(ROOT)]),
    }
    out = subprocess.run(
        [sys.executable, "-c", _ANSWER, str(gliner2_dir), json.dumps(TEXTS), json.dumps(SCHEMA)],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    answer: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return answer


def _set_order(names: list[str]) -> list[str]:
    values: set[str] = set()
    values.update(names)
    return list(values)


def _set_order_in_process(seed: int, names: list[str]) -> list[str]:
    probe = "import sys; s = set(); s.update(sys.argv[1:]); print(','.join(s))"
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run([sys.executable, "-c", probe, *names], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().split(",")


def test_structure_does_not_depend_on_string_hashing(gliner2: Gliner2Adapter, gliner2_dir: Path) -> None:
    """A process whose built-in sets order the schema's fields differently from this one's
    answers as this one does (one such process: this one is the other side of the pair)."""
    names = list(SCHEMA["properties"])
    here_keeps_order = _set_order(names) == names
    # The first seed on the other side: it keeps the schema's order where this process does not, or not where it does.
    seed = next(s for s in range(50) if (_set_order_in_process(s, names) == names) != here_keeps_order)
    assert _set_order_in_process(seed, names) != _set_order(names)
    here = [item["data"] for item in run(gliner2, ExtractTask(texts=TEXTS, labels=(), output_schema=SCHEMA))[0]]
    assert _answer_in_process(gliner2_dir, seed) == here


def test_ordered_set() -> None:
    values = OrderedSet(["b", "a"])
    values.update(["c", "a"], ["d"])
    values.add("b")
    assert list(values) == ["b", "a", "c", "d"] and len(values) == 4 and "c" in values and "z" not in values


def test_fused_requests_equal_each_alone(gliner2: Gliner2Adapter) -> None:
    tasks = [
        ExtractTask(texts=TEXTS, labels=LABELS),
        ExtractTask(texts=TEXTS[:1], labels=LABELS, threshold=0.52),
        ExtractTask(texts=TEXTS[1:], labels=["org"], options={"classification_task": "t"}, threshold=0.0),
        ExtractTask(texts=TEXTS, labels=(), output_schema=SCHEMA),
        ExtractTask(texts=TEXTS[1:], labels=LABELS),
    ]
    prepared = [gliner2.prepare(task) for task in tasks]
    assert prepared[0].compat_key == prepared[4].compat_key
    assert len({p.compat_key for p in prepared}) == 4
    fused = run(gliner2, *tasks)
    for task, together in zip(tasks, fused, strict=True):
        alone = run(gliner2, task)[0]
        assert [i["data"] for i in together] == [i["data"] for i in alone]
        for a, b in zip(together, alone, strict=True):
            assert [(e["start"], e["end"], e["label"]) for e in a["entities"]] == [
                (e["start"], e["end"], e["label"]) for e in b["entities"]
            ]
            assert [c["label"] for c in a["classifications"]] == [c["label"] for c in b["classifications"]]


def test_usage_counts_the_texts(gliner2: Gliner2Adapter) -> None:
    prepared = gliner2.prepare(ExtractTask(texts=TEXTS, labels=LABELS))
    tokenizer = gliner2.model.processor.tokenizer
    assert prepared.input_tokens == sum(len(tokenizer(text)["input_ids"]) for text in TEXTS)
    assert all(cost > 0 for cost in prepared.item_costs)


def test_long_texts_are_cut_or_refused(gliner2: Gliner2Adapter) -> None:
    long_text = "Marie went to Paris. " * 400
    prepared = gliner2.prepare(ExtractTask(texts=[long_text], labels=LABELS))
    assert prepared.item_costs[0] <= gliner2.max_tokens
    (item,) = gliner2.forward([Part(prepared, 0, 1)])[0]
    assert all(e["end"] <= len(long_text) for e in item["entities"])
    with pytest.raises(InputTooLong) as raised:
        gliner2.prepare(ExtractTask(texts=["short.", long_text], labels=LABELS, overflow="error"))
    assert raised.value.extra["index"] == 1


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "array"}, "type is 'object'"),
        ({"type": "object", "properties": {}}, "non-empty 'properties'"),
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, "only string"),
        ({"type": "object", "properties": {"a::b": {"type": "string"}}}, "names may not"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": ["x|y"]}}}, "enum values"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "enum needs"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}, "must be an object of"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "$defs": {}}, "unsupported keywords"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}}}, "only string"),
    ],
)
def test_bad_schemas_are_400(gliner2: Gliner2Adapter, schema: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=(), output_schema=schema))


def test_schema_fields() -> None:
    assert schema_fields(SCHEMA) == ("name::str::who it is about", "places::list", "kind::[person|company]::str")


def test_request_errors(gliner2: Gliner2Adapter) -> None:
    with pytest.raises(InvalidInput, match="labels"):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=()))
    with pytest.raises(InvalidInput, match="not both"):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=LABELS, output_schema=SCHEMA))
    with pytest.raises(InvalidInput, match="classification_task"):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=LABELS, options={"classification_task": " "}))
    with pytest.raises(InvalidInput, match="flat_ner"):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=LABELS, flat_ner=True))
    with pytest.raises(InvalidInput, match="tokens"):
        gliner2.prepare(ExtractTask(texts=TEXTS, labels=[f"label {i}" for i in range(200)]))


def test_catalog_classifier_defaults(gliner2_dir: Path) -> None:
    guard = Gliner2Adapter.load(
        load_context(gliner2_dir, classification_task="safety", default_labels=["safe", "unsafe"], threshold=0.0)
    )
    (item,) = run(guard, ExtractTask(texts=TEXTS[:1], labels=()))[0]
    assert [c["label"] for c in item["classifications"]] in (["safe"], ["unsafe"])
    with pytest.raises(ValueError, match="threshold"):
        Gliner2Adapter.load(load_context(gliner2_dir, threshold=2))
    with pytest.raises(ValueError, match="PyTorch only"):
        Gliner2Adapter.load(replace(load_context(gliner2_dir), backend="openvino"))


async def test_extract_route_end_to_end(gliner2_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: gliner2\nsource: {{path: {gliner2_dir}}}\ntasks: [extract]\noptions:\n  threshold: 0.5\n"
    url, json_only = "/v1/extract/tiny/gliner2", {"Accept": "application/json"}
    async with serving_one_entry(tmp_path, "tiny/gliner2", entry) as client:
        structured = await client.post(
            url, headers=json_only, json={"items": [{"text": TEXTS[0]}], "params": {"output_schema": SCHEMA}}
        )
        entities = await client.post(
            url, headers=json_only, json={"items": [{"text": TEXTS[0]}], "params": {"labels": LABELS}}
        )
        bad = await client.post(
            url, headers=json_only, json={"items": [{"text": "x"}], "params": {"output_schema": {"type": "object"}}}
        )
    assert structured.status_code == 200, structured.text
    assert set(structured.json()["items"][0]["data"]) == {"name", "places", "kind"}
    assert entities.status_code == 200 and entities.json()["items"][0]["entities"]
    assert bad.status_code == 400 and bad.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
