"""GLiNER2 2.x entity models: Sift's answers equal gliner2 2.0.0's own (recorded by
scripts/record_gliner2_v2_parity.py into tests/fixtures/gliner2_v2_parity.json) on the
tiny 2.x checkpoint, and what the adapter cannot serve is a 400 or a refused load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters import gliner2_v2
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.gliner2_v2 import Gliner2V2Adapter, item_answer
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.fixtures.tiny_gliner2_v2 import CASES, FIXTURE, MODEL, build_tiny_gliner2_v2

RECORDED: dict[str, Any] = json.loads(FIXTURE.read_text())["answers"]
TOL = 1e-5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gliner2_v2(tmp_path_factory.mktemp("gliner2-v2"))


@pytest.fixture(scope="module")
def adapter(model_dir: Path) -> Any:
    loaded = Gliner2V2Adapter.load(load_context(model_dir))
    yield loaded
    loaded.close()


def task(case: dict[str, Any], **changes: Any) -> ExtractTask:
    fields: dict[str, Any] = {"texts": case["texts"], "labels": case["labels"], "threshold": case["threshold"]}
    return ExtractTask(**(fields | changes))


def run(adapter: Gliner2V2Adapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(t) for t in tasks]
    return adapter.forward([Part(p, 0, len(t.texts)) for p, t in zip(prepared, tasks, strict=True)])


def expected(case: dict[str, Any]) -> list[list[tuple[str, str, int, int, float]]]:
    """The library's answer as the reference shapes it: one list per text, in text order."""
    items = []
    for raw in RECORDED[case["name"]]:
        spans = [
            (s["text"], label, s["start"], s["end"], s["confidence"])
            for label, found in raw["entities"].items()
            for s in found
        ]
        items.append(sorted(spans, key=lambda span: span[2]))
    return items


def assert_same(got: list[dict[str, Any]], case: dict[str, Any]) -> None:
    want = expected(case)
    assert len(got) == len(want)
    for item, spans in zip(got, want, strict=True):
        assert [(e["text"], e["label"], e["start"], e["end"]) for e in item["entities"]] == [s[:4] for s in spans]
        for entity, span in zip(item["entities"], spans, strict=True):
            assert abs(entity["score"] - span[4]) <= TOL


def test_the_fixture_is_not_vacuous() -> None:
    assert [case["name"] for case in CASES] == sorted(RECORDED, key=[c["name"] for c in CASES].index)
    assert all(any(item for item in expected(case)) for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_entities_equal_the_library(adapter: Gliner2V2Adapter, case: dict[str, Any]) -> None:
    [got] = run(adapter, task(case))
    assert_same(got, case)
    for item in got:
        counts = item["data"]
        assert 0 < counts["schema_prompt_token_count"] < counts["encoded_row_token_count"]


def test_fused_requests_equal_each_alone(adapter: Gliner2V2Adapter) -> None:
    first, second = CASES[0], {**CASES[0], "texts": CASES[0]["texts"][::-1], "name": "reversed"}
    got = run(adapter, task(first), task(second))
    assert_same(got[0], first)
    assert [e["text"] for e in got[1][1]["entities"]] == [e["text"] for e in got[0][0]["entities"]]


def test_a_span_on_the_appended_period_is_cut_to_the_text() -> None:
    answer = {
        "entities": {"city": [{"text": "Berlin.", "confidence": 0.6, "start": 7, "end": 14}]},
        "row_tokens": 9,
        "document_tokens": 4,
    }
    item = item_answer(answer, "Dear X Berlin")
    assert item["entities"] == [{"text": "Berlin", "label": "city", "score": 0.6, "start": 7, "end": 13}]
    assert item["data"] == {"encoded_row_token_count": 9, "schema_prompt_token_count": 5}


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"labels": []}, InvalidInput, "pass params.labels"),
        ({"labels": ["person", "person"]}, InvalidInput, "unique"),
        ({"labels": ["a [SEP_TEXT] b"]}, InvalidInput, "marker"),
        ({"labels": ["x" * 129]}, InvalidInput, "128 characters"),
        ({"texts": ["  "]}, InvalidInput, "non-blank"),
        ({"options": {"top_k": 3}}, InvalidInput, "only options.threshold"),
        ({"output_schema": {"type": "object"}}, InvalidInput, "output_schema"),
        ({"texts": ["word " * 5000]}, InputTooLong, "never cut"),
        ({"texts": ["word " * 5000], "overflow": "error"}, InputTooLong, "never cut"),
    ],
)
def test_request_errors(adapter: Gliner2V2Adapter, changes: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        adapter.prepare(task(CASES[0], **changes))


def test_a_prompt_over_its_limit_is_too_long(model_dir: Path) -> None:
    small = Gliner2V2Adapter.load(load_context(model_dir, max_prompt_tokens=4))
    try:
        with pytest.raises(InputTooLong, match="at most 4"):
            small.prepare(task(CASES[0], labels=["person", "city", "country"]))
    finally:
        small.close()


def test_without_the_side_install_the_load_is_refused(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gliner2_v2, "side_path", lambda: tmp_path / "absent")
    with pytest.raises(ValueError, match=r"bootstrap\.sh"):
        Gliner2V2Adapter.load(load_context(model_dir))


def test_a_folder_that_is_not_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a GLiNER2 checkpoint"):
        Gliner2V2Adapter.load(load_context(tmp_path))


async def test_extract_route_end_to_end(model_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: gliner2-v2\nsource: {{path: {model_dir}}}\ntasks: [extract]\n"
    url, json_only = f"/v1/extract/{MODEL}", {"Accept": "application/json"}
    case = CASES[1]
    body = {
        "items": [{"text": t} for t in case["texts"]],
        "params": {"labels": case["labels"], "options": {"threshold": case["threshold"]}},
    }
    async with serving_one_entry(tmp_path, MODEL, entry) as client:
        good = await client.post(url, headers=json_only, json=body)
        schema = await client.post(
            url, headers=json_only, json={**body, "params": {"output_schema": {"type": "object"}}}
        )
    assert good.status_code == 200, good.text
    assert_same(good.json()["items"], case)
    assert schema.status_code == 400 and schema.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
