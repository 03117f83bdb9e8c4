"""The LightOnOCR-2 adapter on the tiny model, in process and through the app, against
transformers' own answers recorded in tests/fixtures/lighton_ocr_parity.json
(scripts/record_image_generation_parity.py lighton_ocr), and the rules around it:
same-size pages of several requests in one ``generate``, pages of other sizes each
in theirs, 400s naming what a request got wrong, other architectures refused at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._ocr_vl_rules import lighton_messages, lighton_request, through_end, wire_entities
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.lighton_ocr import LightOnOcrAdapter
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.image_generation_cases import (
    JSON,
    assert_app_answers,
    case_named,
    catalog_entry,
    page,
    page_task,
    post_options,
    recorded_answers,
    retyped,
)
from tests.adapters.test_clip import serving
from tests.fixtures.tiny_lighton_ocr import TINY_LIGHTON_OCR, build_tiny_lighton_ocr, catalog_options, lighton_ocr_cases

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lighton_ocr_parity.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lighton_ocr(tmp_path_factory.mktemp("lighton_ocr") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> LightOnOcrAdapter:
    return LightOnOcrAdapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    return recorded_answers(FIXTURE)


def _case(name: str) -> dict[str, Any]:
    return case_named(lighton_ocr_cases(), name)


@pytest.mark.parametrize("case", lighton_ocr_cases(), ids=lambda case: case["name"])
def test_answers_equal_transformers_own(adapter: LightOnOcrAdapter, case: dict[str, Any]) -> None:
    """All of a case's pages (four sizes) in one forward answer as each page alone."""
    (outputs,) = adapter.forward([Part(adapter.prepare(page_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert result["entities"] == want["entities"], f"{case['name']}[{index}]"


def test_the_recorded_answers_say_something() -> None:
    """The random decoder writes text (not empty entities), and the cases differ."""
    answers = recorded()
    assert all(len(item["entities"][0]["text"]) >= 3 for item in answers["catalog-default"])
    assert answers["instruction"] != answers["catalog-default"]
    assert all(item["entities"][0]["label"] == "markdown" for items in answers.values() for item in items)


def test_same_size_pages_of_concurrent_requests_share_one_generate(adapter: LightOnOcrAdapter) -> None:
    case = _case("catalog-default")
    first = adapter.prepare(page_task(case, ["square_jpeg"]))
    second = adapter.prepare(page_task(case, ["square_jpeg", "wide_png"]))
    assert first.compat_key == second.compat_key
    assert adapter.prepare(page_task(_case("short"), ["square_jpeg"])).compat_key != first.compat_key
    calls: list[int] = []
    hook = adapter.model.model.vision_encoder.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(int((args[0] if args else kwargs["pixel_values"]).shape[0])),
        with_kwargs=True,
    )
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    # The two square pages in one generate, the wide page in its own.
    assert sorted(calls) == [1, 2]
    want = recorded()["catalog-default"]
    names = case["images"]
    assert out[0][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][1]["entities"] == want[names.index("wide_png")]["entities"]


def test_bad_requests_are_refused_by_name(adapter: LightOnOcrAdapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"num_beams": 0}, r"'num_beams'"),
        ({"num_beams": True}, r"'num_beams'"),
        ({"max_new_tokens": "many"}, r"'max_new_tokens'"),
        ({"max_new_tokens": 10**6}, r"'max_new_tokens'"),
        ({"max_new_tokens": 500}, r"exceed the decoder's 512 positions"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(page_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))
    with pytest.raises(InvalidInput, match="does not apply to LightOnOCR"):
        adapter.prepare(ExtractTask(texts=[""], labels=(), images=[(page("wide_png"),)], output_schema={"a": "str"}))


def test_the_rules() -> None:
    assert lighton_messages("S", None) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "image"}]},
    ]
    assert lighton_messages("S", "tables")[1]["content"][1] == {"type": "text", "text": "tables"}
    assert lighton_request({}, "", max_new_tokens=9, num_beams=1).text is None
    assert wire_entities("  # Title\n", "markdown") == [{"text": "# Title", "label": "markdown", "score": 1.0}]
    assert through_end([5, 6, 2, 1, 1], frozenset({2})) == [5, 6, 2]
    assert through_end([5, 6], frozenset({2})) == [5, 6]


def test_other_architectures_and_bad_catalog_options_are_refused(folder: Path, tmp_path: Path) -> None:
    copy = retyped(folder, tmp_path / "qwen3_5", "qwen3_5")
    with pytest.raises(UnservableModel, match=r"not 'lighton_ocr'.*LightOnOCR-3 .*samples from unseeded"):
        LightOnOcrAdapter.load(load_context(copy))
    with pytest.raises(ValueError, match="num_beams"):
        LightOnOcrAdapter.load(load_context(folder, num_beams=0))
    with pytest.raises(ValueError, match="system_prompt"):
        LightOnOcrAdapter.load(load_context(folder, system_prompt=" "))


def entry(folder: Path) -> str:
    return catalog_entry(TINY_LIGHTON_OCR, "lighton-ocr", folder, catalog_options())


async def test_the_app_answers_the_recorded_markdown(folder: Path, tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_LIGHTON_OCR: entry(folder)}) as client:
        cases = [_case("catalog-default"), _case("instruction")]
        await assert_app_answers(client, TINY_LIGHTON_OCR, cases, recorded())
        bad = await post_options(client, TINY_LIGHTON_OCR, cases[-1]["images"][0], {"num_beams": 0})
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
        text_only = await client.post(f"/v1/extract/{TINY_LIGHTON_OCR}", json={"items": [{"text": "a"}]}, headers=JSON)
        assert text_only.status_code == 400
        assert "items[0]" in text_only.json()["detail"]["message"]
        listed = (await client.get(f"/v1/models/{TINY_LIGHTON_OCR}")).json()
        assert listed["inputs"] == ["image"], listed
