"""The GLM-OCR adapter on the tiny model, in process and through the app, against
transformers' own answers recorded in tests/fixtures/glm_ocr_parity.json
(scripts/record_image_generation_parity.py glm_ocr: the reference's steps, the image in
the chat through ``apply_chat_template(tokenize=True)``), and the rules around it: the
user text and its instruction, same-shaped pages of several requests in one
``generate``, 400s naming what a request got wrong, and folders refused at load
(another architecture, weights missing, no image processor)."""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._ocr_vl_rules import GLM_USER_TEXT, glm_request, user_turn
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.glm_ocr import GlmOcrAdapter
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
    with_one_weight_reshaped,
    without_one_weight,
)
from tests.adapters.test_clip import serving
from tests.fixtures.tiny_glm_ocr import TINY_GLM_OCR, build_tiny_glm_ocr, catalog_options, glm_ocr_cases

FIXTURE = Path(__file__).parents[1] / "fixtures" / "glm_ocr_parity.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_glm_ocr(tmp_path_factory.mktemp("glm_ocr") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> GlmOcrAdapter:
    return GlmOcrAdapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    return recorded_answers(FIXTURE)


def _case(name: str) -> dict[str, Any]:
    return case_named(glm_ocr_cases(), name)


@pytest.mark.parametrize("case", glm_ocr_cases(), ids=lambda case: case["name"])
def test_answers_equal_transformers_own(adapter: GlmOcrAdapter, case: dict[str, Any]) -> None:
    """All of a case's pages (four sizes) in one forward answer as each page alone."""
    (outputs,) = adapter.forward([Part(adapter.prepare(page_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert result["entities"] == want["entities"], f"{case['name']}[{index}]"


def test_the_recorded_answers_say_something() -> None:
    answers = recorded()
    default = [item["entities"][0]["text"] for item in answers["catalog-default"]]
    assert all(len(text) >= 3 for text in default)
    assert len(set(default)) == len(default), "the random model's answer follows the image"
    assert answers["instruction"] != answers["catalog-default"]
    assert {item["entities"][0]["label"] for items in answers.values() for item in items} == {"markdown"}


def test_same_shaped_pages_of_concurrent_requests_share_one_generate(adapter: GlmOcrAdapter) -> None:
    case = _case("catalog-default")
    first = adapter.prepare(page_task(case, ["square_jpeg"]))
    second = adapter.prepare(page_task(case, ["square_jpeg", "tall_png"]))
    assert first.compat_key == second.compat_key
    assert adapter.prepare(page_task(_case("instruction"), ["square_jpeg"])).compat_key != first.compat_key
    calls: list[int] = []
    hook = adapter.model.model.visual.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(1), with_kwargs=True
    )
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    # Two generates: the square pages together, the tall page alone.
    assert len(calls) == 2
    want = recorded()["catalog-default"]
    names = case["images"]
    assert out[0][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][0]["entities"] == want[names.index("square_jpeg")]["entities"]
    assert out[1][1]["entities"] == want[names.index("tall_png")]["entities"]


def test_bad_requests_are_refused_by_name(adapter: GlmOcrAdapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"num_beams": 0}, r"'num_beams'"),
        ({"num_beams": 9}, r"'num_beams'"),
        ({"max_new_tokens": "many"}, r"'max_new_tokens'"),
        ({"max_new_tokens": 500}, r"exceed the decoder's 512 positions"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(page_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))
    with pytest.raises(InvalidInput, match="output_schema"):
        adapter.prepare(
            ExtractTask(texts=["a"], labels=(), output_schema={"type": "object"}, images=[(page("wide_png"),)])
        )


def test_the_rules() -> None:
    default = glm_request({}, None, user_text=GLM_USER_TEXT, max_new_tokens=9, num_beams=1)
    assert (default.text, default.label) == ("Text Recognition:", "markdown")
    # The reference reads no task option for GLM-OCR: the instruction is the prompt.
    told = glm_request({"task": "table"}, "Table Recognition:", user_text=GLM_USER_TEXT, max_new_tokens=9, num_beams=1)
    assert (told.text, told.label) == ("Table Recognition:", "markdown")
    assert user_turn("x") == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]


def test_other_folders_and_bad_catalog_options_are_refused(folder: Path, tmp_path: Path) -> None:
    other = retyped(folder, tmp_path / "other", "glm4v")
    with pytest.raises(UnservableModel, match=r"not 'glm_ocr'"):
        GlmOcrAdapter.load(load_context(other))
    partial = without_one_weight(folder, tmp_path / "partial")
    with pytest.raises(UnservableModel, match="weights missing"):
        GlmOcrAdapter.load(load_context(partial))
    reshaped = with_one_weight_reshaped(folder, tmp_path / "reshaped")
    with pytest.raises(UnservableModel, match="mismatched"):
        GlmOcrAdapter.load(load_context(reshaped))
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    (bare / "preprocessor_config.json").unlink()
    with pytest.raises(UnservableModel, match=r"preprocessor_config\.json"):
        GlmOcrAdapter.load(load_context(bare))
    with pytest.raises(ValueError, match="user_text"):
        GlmOcrAdapter.load(load_context(folder, user_text=" "))
    with pytest.raises(ValueError, match="max_new_tokens"):
        GlmOcrAdapter.load(load_context(folder, max_new_tokens=0))


def entry(folder: Path) -> str:
    return catalog_entry(TINY_GLM_OCR, "glm-ocr", folder, catalog_options())


async def test_the_app_answers_the_recorded_text(folder: Path, tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_GLM_OCR: entry(folder)}) as client:
        cases = [_case("catalog-default"), _case("instruction")]
        await assert_app_answers(client, TINY_GLM_OCR, cases, recorded())
        bad = await post_options(client, TINY_GLM_OCR, cases[-1]["images"][0], {"num_beams": 99})
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
        assert "'num_beams'" in bad.json()["detail"]["message"]
        sliver = io.BytesIO()
        page("wide_png").resize((2, 600)).save(sliver, format="PNG")
        thin = {"images": [{"data": base64.b64encode(sliver.getvalue()).decode(), "format": "png"}]}
        refused = await client.post(f"/v1/extract/{TINY_GLM_OCR}", json={"items": [thin]}, headers=JSON)
        assert refused.status_code == 400, refused.text
        assert "aspect ratio" in refused.json()["detail"]["message"]
        text_only = await client.post(f"/v1/extract/{TINY_GLM_OCR}", json={"items": [{"text": "a page"}]}, headers=JSON)
        assert text_only.status_code == 400, text_only.text
