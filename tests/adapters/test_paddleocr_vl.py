"""The PaddleOCR-VL adapter on the tiny model, in process and through the app, against
transformers' own answers recorded in tests/fixtures/paddleocr_vl_parity.json
(scripts/record_image_generation_parity.py paddleocr_vl), and the rules around it:
the task's prompt and label, same-shaped pages of several requests in one
``generate``, 400s naming what a request got wrong, and folders refused at load
(another architecture, weights missing from the checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._ocr_vl_rules import PADDLE_TASK_PROMPTS, paddle_messages, paddle_request
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.paddleocr_vl import PaddleOcrVlAdapter
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.image_generation_cases import (
    assert_app_answers,
    case_named,
    catalog_entry,
    page_task,
    post_options,
    recorded_answers,
    retyped,
    without_one_weight,
)
from tests.adapters.test_clip import serving
from tests.fixtures.tiny_paddleocr_vl import (
    TINY_PADDLEOCR_VL,
    build_tiny_paddleocr_vl,
    catalog_options,
    paddleocr_vl_cases,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "paddleocr_vl_parity.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_paddleocr_vl(tmp_path_factory.mktemp("paddleocr_vl") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> PaddleOcrVlAdapter:
    return PaddleOcrVlAdapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    return recorded_answers(FIXTURE)


def _case(name: str) -> dict[str, Any]:
    return case_named(paddleocr_vl_cases(), name)


@pytest.mark.parametrize("case", paddleocr_vl_cases(), ids=lambda case: case["name"])
def test_answers_equal_transformers_own(adapter: PaddleOcrVlAdapter, case: dict[str, Any]) -> None:
    """All of a case's pages (four sizes) in one forward answer as each page alone."""
    (outputs,) = adapter.forward([Part(adapter.prepare(page_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert result["entities"] == want["entities"], f"{case['name']}[{index}]"


def test_the_recorded_answers_say_something() -> None:
    answers = recorded()
    assert all(len(item["entities"][0]["text"]) >= 3 for item in answers["catalog-default"])
    assert answers["table"] != answers["catalog-default"]
    assert {item["entities"][0]["label"] for item in answers["spotting"]} == {"spotting"}
    assert {item["entities"][0]["label"] for item in answers["instruction"]} == {"seal"}


def test_same_shaped_pages_of_concurrent_requests_share_one_generate(adapter: PaddleOcrVlAdapter) -> None:
    case = _case("catalog-default")
    first = adapter.prepare(page_task(case, ["square_jpeg"]))
    second = adapter.prepare(page_task(case, ["square_jpeg", "wide_png"]))
    assert first.compat_key == second.compat_key
    assert adapter.prepare(page_task(_case("table"), ["square_jpeg"])).compat_key != first.compat_key
    calls: list[int] = []
    hook = adapter.model.model.visual.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(1), with_kwargs=True
    )
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    # Two generates: the square pages together, the wide page alone.
    assert len(calls) == 2
    want = recorded()["catalog-default"]
    names = case["images"]
    assert out[0][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][1]["entities"] == want[names.index("wide_png")]["entities"]


def test_bad_requests_are_refused_by_name(adapter: PaddleOcrVlAdapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"task": "ocr_with_region"}, r"'task' must be one of ocr, table"),
        ({"task": 1}, r"'task'"),
        ({"num_beams": 0}, r"'num_beams'"),
        ({"max_new_tokens": "many"}, r"'max_new_tokens'"),
        ({"max_new_tokens": 500}, r"exceed the decoder's 512 positions"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(page_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))


def test_the_rules() -> None:
    assert paddle_messages("OCR:") == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR:"}]}
    ]
    table = paddle_request({"task": "table"}, None, default_task="ocr", max_new_tokens=9, num_beams=1)
    assert (table.text, table.label) == (PADDLE_TASK_PROMPTS["table"], "markdown")
    seal = paddle_request({"task": "seal"}, "Read it.", default_task="ocr", max_new_tokens=9, num_beams=1)
    assert (seal.text, seal.label) == ("Read it.", "seal")


def test_other_folders_and_bad_catalog_options_are_refused(folder: Path, tmp_path: Path) -> None:
    other = retyped(folder, tmp_path / "other", "qwen2_vl")
    with pytest.raises(UnservableModel, match=r"not 'paddleocr_vl'"):
        PaddleOcrVlAdapter.load(load_context(other))
    partial = without_one_weight(folder, tmp_path / "partial")
    with pytest.raises(UnservableModel, match="weights missing"):
        PaddleOcrVlAdapter.load(load_context(partial))
    with pytest.raises(InvalidInput, match="'task'"):
        PaddleOcrVlAdapter.load(load_context(folder, task="layout"))
    with pytest.raises(ValueError, match="max_new_tokens"):
        PaddleOcrVlAdapter.load(load_context(folder, max_new_tokens=0))


def entry(folder: Path) -> str:
    return catalog_entry(TINY_PADDLEOCR_VL, "paddleocr-vl", folder, catalog_options())


async def test_the_app_answers_the_recorded_text(folder: Path, tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_PADDLEOCR_VL: entry(folder)}) as client:
        cases = [_case("catalog-default"), _case("instruction")]
        await assert_app_answers(client, TINY_PADDLEOCR_VL, cases, recorded())
        bad = await post_options(client, TINY_PADDLEOCR_VL, cases[-1]["images"][0], {"task": "layout"})
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
        assert "'task'" in bad.json()["detail"]["message"]
