"""The Donut adapter on the tiny model, in process and through the app, against
transformers' own answers recorded in tests/fixtures/donut_parity.json
(scripts/record_image_generation_parity.py donut): the images of several requests in one
``generate``, and 400s naming what a request got wrong."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._donut_rules import clean_sequence, fallback_json, resolve_request, wire_entities
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.donut import DonutAdapter
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.test_clip import serving
from tests.fixtures.tiny_detection import detection_images
from tests.fixtures.tiny_donut import TINY_DONUT, build_tiny_donut, catalog_options, donut_cases

FIXTURE = Path(__file__).parents[1] / "fixtures" / "donut_parity.json"
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_donut(tmp_path_factory.mktemp("donut") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> DonutAdapter:
    return DonutAdapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    answers: dict[str, list[dict[str, Any]]] = json.loads(FIXTURE.read_text())["answers"]
    return answers


def _task(case: dict[str, Any], images: list[str] | None = None) -> ExtractTask:
    from PIL import Image

    names = images or case["images"]
    return ExtractTask(
        texts=[""] * len(names),
        labels=(),
        instruction=case["instruction"],
        options=case["options"],
        images=[(Image.open(io.BytesIO(detection_images()[name][0])).convert("RGB"),) for name in names],
    )


@pytest.mark.parametrize("case", donut_cases(), ids=lambda case: case["name"])
def test_entities_equal_transformers_own(adapter: DonutAdapter, case: dict[str, Any]) -> None:
    """All of a case's images in one batched generate answer as each image alone."""
    (outputs,) = adapter.forward([Part(adapter.prepare(_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert result["entities"] == want["entities"], f"{case['name']}[{index}]"
        assert result["objects"] == [] and result["data"] == {}


def test_the_cases_exercise_the_entities() -> None:
    answers = recorded()
    assert all(item["entities"] for item in answers["cord"])
    assert any(item["entities"] for item in answers["docvqa"])


def test_concurrent_requests_share_one_generate(adapter: DonutAdapter) -> None:
    case = donut_cases()[0]
    first = adapter.prepare(_task(case, ["square_jpeg"]))
    second = adapter.prepare(_task(case, ["wide_png", "tall_png"]))
    assert first.compat_key == second.compat_key
    calls: list[int] = []
    hook = adapter.model.encoder.register_forward_pre_hook(lambda _m, args, kwargs: calls.append(1), with_kwargs=True)
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    assert calls == [1]
    want = recorded()[case["name"]]
    names = case["images"]
    assert out[0][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][0]["entities"] == want[names.index("wide_png")]["entities"]
    assert out[1][1]["entities"] == want[names.index("tall_png")]["entities"]


def test_bad_requests_are_refused_by_name(adapter: DonutAdapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"task": "cord"}, r"'task'"),
        ({"num_beams": 99}, r"'num_beams'"),
        ({"max_new_tokens": 0}, r"'max_new_tokens'"),
        ({"max_new_tokens": 4000}, r"exceed the decoder's 128 positions"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))


def test_the_rules() -> None:
    request = resolve_request({"task": "<s_docvqa>"}, "why?", default_task="<s_cord-v2>", max_new_tokens=8, num_beams=1)
    assert request.prompt == "<s_docvqa><s_question>why?</s_question><s_answer>"
    assert clean_sequence("<s_docvqa><s_answer> 12</s_answer></s><pad>", "</s>", "<pad>") == "<s_answer> 12</s_answer>"
    # The reference's pattern (<s_\w+>) skips a hyphenated task token: the first field tag goes instead.
    assert clean_sequence("<s_cord-v2><s_nm> tea</s_nm></s>", "</s>", "<pad>") == "<s_cord-v2> tea</s_nm>"
    assert fallback_json('<s_x>{"a": 1}') == {"a": 1}
    assert fallback_json("plain") == {"raw": "plain"}
    cord = {"menu": [{"nm": "tea", "price": "3"}], "total": {"total_price": "3"}}
    assert [e["label"] for e in wire_entities(cord, "<s_cord-v2>")] == [
        "menu[0].nm",
        "menu[0].price",
        "total.total_price",
    ]
    assert wire_entities({"answer": "12"}, "<s_docvqa>") == [{"text": "12", "label": "answer", "score": 1.0}]
    assert wire_entities({"class": "form"}, "<s_rvlcdip>")[0]["label"] == "document_class"
    assert wire_entities({"x": "y"}, "<s_synthdog>") == []


def entry(folder: Path) -> str:
    options = "".join(
        f'  {key}: "{value}"\n' if isinstance(value, str) else f"  {key}: {value}\n"
        for key, value in catalog_options().items()
    )
    return f"name: {TINY_DONUT}\nadapter: donut\nsource:\n  path: {folder}\ntasks: [extract]\noptions:\n{options}"


async def test_the_app_answers_the_recorded_entities(folder: Path, tmp_path: Path) -> None:
    case = next(c for c in donut_cases() if c["name"] == "docvqa")
    async with serving(tmp_path, {TINY_DONUT: entry(folder)}) as client:
        items = []
        for name in case["images"]:
            data, fmt = detection_images()[name]
            items.append({"images": [{"data": base64.b64encode(data).decode(), "format": fmt}]})
        params = {"options": case["options"], "instruction": case["instruction"]}
        response = await client.post(f"/v1/extract/{TINY_DONUT}", json={"items": items, "params": params}, headers=JSON)
        assert response.status_code == 200, response.text
        for item, want in zip(response.json()["items"], recorded()[case["name"]], strict=True):
            assert item["entities"] == want["entities"]
        bad = await client.post(
            f"/v1/extract/{TINY_DONUT}", json={"items": items[:1], "params": {"options": {"task": 1}}}, headers=JSON
        )
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
