"""The MinerU2.5 adapter (a Qwen2-VL checkpoint) on the tiny model, in process and
through the app, against transformers' own answers recorded in
tests/fixtures/mineru_parity.json (scripts/record_image_generation_parity.py mineru:
the reference's prompts, labels and ``generate`` settings, its n-gram ban through
transformers' ``no_repeat_ngram_size``), and the rules around it: the task's prompt
and label, the ban, same-shaped pages of several requests in one ``generate``, 400s
naming what a request got wrong, and folders refused at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._ocr_vl_rules import MINERU_TASK_PROMPTS, mineru_request
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.mineru import MinerUAdapter
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
from tests.fixtures.tiny_mineru import TINY_MINERU, build_tiny_mineru, catalog_options, mineru_cases

FIXTURE = Path(__file__).parents[1] / "fixtures" / "mineru_parity.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_mineru(tmp_path_factory.mktemp("mineru") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> MinerUAdapter:
    return MinerUAdapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    return recorded_answers(FIXTURE)


def _case(name: str) -> dict[str, Any]:
    return case_named(mineru_cases(), name)


def _answers(adapter: MinerUAdapter, case: dict[str, Any]) -> list[dict[str, Any]]:
    (outputs,) = adapter.forward([Part(adapter.prepare(page_task(case)), 0, len(case["images"]))])
    return outputs


@pytest.mark.parametrize("case", mineru_cases(), ids=lambda case: case["name"])
def test_answers_equal_transformers_own(adapter: MinerUAdapter, case: dict[str, Any]) -> None:
    """All of a case's pages (four sizes) in one forward answer as each page alone."""
    for index, (result, want) in enumerate(zip(_answers(adapter, case), recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert result["entities"] == want["entities"], f"{case['name']}[{index}]"


def test_the_recorded_answers_say_something() -> None:
    answers = recorded()
    default = [item["entities"][0]["text"] for item in answers["catalog-default"]]
    assert all(len(text) >= 3 for text in default)
    assert len(set(default)) == len(default), "the random model's answer follows the image"
    assert answers["table"] != answers["catalog-default"]
    assert {item["entities"][0]["label"] for item in answers["layout"]} == {"mineru_layout"}
    assert {item["entities"][0]["label"] for item in answers["instruction"]} == {"mineru_equation"}


def test_the_n_gram_ban_is_in_the_answers(folder: Path) -> None:
    """Without the tiny catalog's short ban the random model answers otherwise: the
    recorded answers (and Sift's) carry it."""
    unbanned = MinerUAdapter.load(load_context(folder, **{**catalog_options(), "no_repeat_ngram_size": 100}))
    case = _case("catalog-default")
    got = [item["entities"] for item in _answers(unbanned, case)]
    assert got != [item["entities"] for item in recorded()[case["name"]]]


def test_same_shaped_pages_of_concurrent_requests_share_one_generate(adapter: MinerUAdapter) -> None:
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


def test_bad_requests_are_refused_by_name(adapter: MinerUAdapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"task": "default"}, r"'task' must be one of \[default\], table"),
        ({"task": "ocr"}, r"'task'"),
        ({"task": ["table"]}, r"'task'"),
        ({"num_beams": 0}, r"'num_beams'"),
        ({"max_new_tokens": "many"}, r"'max_new_tokens'"),
        ({"max_new_tokens": 500}, r"exceed the decoder's 512 positions"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(page_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))
    from PIL import Image

    sliver = Image.new("RGB", (600, 2), (10, 20, 30))
    with pytest.raises(InvalidInput, match=r"cannot read the image \(600 x 2\).*aspect ratio"):
        adapter.prepare(ExtractTask(texts=[""], labels=(), images=[(sliver,)]))


def test_the_rules() -> None:
    default = mineru_request({}, None, default_task="[default]", max_new_tokens=9, num_beams=1)
    assert (default.text, default.label) == ("\nText Recognition:", "mineru_text")
    layout = mineru_request({"task": "[layout]"}, None, default_task="[default]", max_new_tokens=9, num_beams=1)
    assert (layout.text, layout.label) == ("\nLayout Detection:", "mineru_layout")
    chart = mineru_request({"task": "chart"}, "Describe.", default_task="[default]", max_new_tokens=9, num_beams=1)
    assert (chart.text, chart.label) == ("Describe.", "mineru_chart")
    assert MINERU_TASK_PROMPTS["image"] == MINERU_TASK_PROMPTS["chart"]


def test_other_folders_and_bad_catalog_options_are_refused(folder: Path, tmp_path: Path) -> None:
    other = retyped(folder, tmp_path / "other", "qwen2_5_vl")
    with pytest.raises(UnservableModel, match=r"not 'qwen2_vl'"):
        MinerUAdapter.load(load_context(other))
    partial = without_one_weight(folder, tmp_path / "partial")
    with pytest.raises(UnservableModel, match="weights missing"):
        MinerUAdapter.load(load_context(partial))
    with pytest.raises(InvalidInput, match="'task'"):
        MinerUAdapter.load(load_context(folder, task="layout"))
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        MinerUAdapter.load(load_context(folder, no_repeat_ngram_size=0))


def entry(folder: Path) -> str:
    return catalog_entry(TINY_MINERU, "mineru", folder, catalog_options())


async def test_the_app_answers_the_recorded_text(folder: Path, tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_MINERU: entry(folder)}) as client:
        cases = [_case("catalog-default"), _case("instruction")]
        await assert_app_answers(client, TINY_MINERU, cases, recorded())
        bad = await post_options(client, TINY_MINERU, cases[-1]["images"][0], {"task": "layout"})
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
        assert "'task'" in bad.json()["detail"]["message"]
