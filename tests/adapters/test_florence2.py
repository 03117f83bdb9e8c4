"""The Florence-2 adapter on the tiny model, in process and through the app, against
transformers' own answers recorded in tests/fixtures/florence2_parity.json
(scripts/record_image_generation_parity.py florence2), and the rules around it: the images of several
requests in one ``generate``, 400s naming what a request got wrong, and Microsoft's
repository-code layout refused at load."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._florence2_rules import quad_bbox, resolve_prompt, wire_answer
from sift_server.adapters._image_generation import sequence_through_eos
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.florence2 import Florence2Adapter
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.test_clip import serving
from tests.fixtures.tiny_detection import detection_images
from tests.fixtures.tiny_florence2 import TINY_FLORENCE2, build_tiny_florence2, catalog_options, florence2_cases

FIXTURE = Path(__file__).parents[1] / "fixtures" / "florence2_parity.json"
JSON = {"Accept": "application/json"}
# Through the app: one case per answer shape (the in-process tests run them all).
APP_CASES = ("caption", "od", "ocr-with-region", "docvqa-instruction")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_florence2(tmp_path_factory.mktemp("florence2") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Florence2Adapter:
    return Florence2Adapter.load(load_context(folder, **catalog_options()))


def recorded() -> dict[str, list[dict[str, Any]]]:
    answers: dict[str, list[dict[str, Any]]] = json.loads(FIXTURE.read_text())["answers"]
    return answers


def _pil(name: str) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(detection_images()[name][0])).convert("RGB")


def _task(case: dict[str, Any], images: list[str] | None = None) -> ExtractTask:
    names = images or case["images"]
    return ExtractTask(
        texts=[""] * len(names),
        labels=(),
        instruction=case["instruction"],
        options=case["options"],
        images=[(_pil(name),) for name in names],
    )


def assert_answer(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    assert got["entities"] == want["entities"], where
    assert got["objects"] == want["objects"], where


@pytest.mark.parametrize("case", florence2_cases(), ids=lambda case: case["name"])
def test_answers_equal_transformers_own(adapter: Florence2Adapter, case: dict[str, Any]) -> None:
    """All of a case's images in one batched generate answer as each image alone."""
    (outputs,) = adapter.forward([Part(adapter.prepare(_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert_answer(result, want, f"{case['name']}[{index}]")


def test_the_cases_exercise_every_shape() -> None:
    """The recorded answers are not all empty: captions have text, OD has boxes."""
    answers = recorded()
    assert all(item["entities"][0]["label"] == "caption" for item in answers["caption"])
    assert sum(len(item["objects"]) for item in answers["od"]) >= 4
    assert sum(len(item["entities"]) for item in answers["ocr-with-region"]) >= 1
    assert all(item["entities"][0]["label"] == "answer" for item in answers["docvqa-instruction"])


def test_concurrent_requests_share_one_generate(adapter: Florence2Adapter) -> None:
    case = next(c for c in florence2_cases() if c["name"] == "caption")
    first = adapter.prepare(_task(case, ["square_jpeg"]))
    second = adapter.prepare(_task(case, ["wide_png", "tall_png"]))
    assert first.compat_key == second.compat_key
    other = adapter.prepare(_task(next(c for c in florence2_cases() if c["name"] == "od"), ["wide_png"]))
    assert other.compat_key != first.compat_key
    calls: list[int] = []
    # The vision tower runs once per generate (the encoder's input), whatever the beams.
    hook = adapter.model.model.vision_tower.register_forward_pre_hook(lambda _m, args: calls.append(args[0].shape[0]))
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    assert calls == [3]
    want = recorded()["caption"]
    names = case["images"]
    assert_answer(out[0][0], want[names.index("square_jpeg")], "square_jpeg")
    assert_answer(out[1][0], want[names.index("wide_png")], "wide_png")
    assert_answer(out[1][1], want[names.index("tall_png")], "tall_png")


def test_bad_requests_are_refused_by_name(adapter: Florence2Adapter) -> None:
    base = {"instruction": None, "images": ["wide_png"]}
    for options, match in [
        ({"task": "<MORE_DETAILED_CAPTION>"}, r"answers no entities"),
        ({"task": "<NOPE>"}, r"not a Florence-2 task"),
        ({"task": 3}, r"'task' must be a string"),
        ({"task": "<OD>", "num_beams": 0}, r"'num_beams'"),
        ({"task": "<OD>", "max_new_tokens": "many"}, r"'max_new_tokens'"),
    ]:
        with pytest.raises(InvalidInput, match=match):
            adapter.prepare(_task({**base, "options": options}))
    with pytest.raises(InvalidInput, match="takes no text"):
        adapter.prepare(_task({**base, "options": {}, "instruction": "<OD> cars"}))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a"], labels=(), images=[()]))


def test_the_rules() -> None:
    assert resolve_prompt("<OD>", None) == ("<OD>", "<OD>")
    assert resolve_prompt("<OD>", "  what is it? ") == ("<DocVQA>what is it?", "<DocVQA>")
    assert resolve_prompt("<OD>", "<CAPTION>") == ("<CAPTION>", "<CAPTION>")
    assert quad_bbox([10.5, 2, 30, 2.9, 30.2, 12, 9.9, 11]) == [9, 2, 20, 10]
    assert sequence_through_eos([2, 0, 7, 2, 1, 1], 2) == [2, 0, 7, 2]
    assert sequence_through_eos([2, 0, 7], 2) == [2, 0, 7]
    entities, objects = wire_answer({"<OD>": {"bboxes": [[1.0, 2.0, 5.5, 9.0]], "labels": [""]}}, "<OD>")
    assert (entities, objects) == ([], [{"label": "object", "score": 1.0, "bbox": [1, 2, 4, 7]}])


def test_microsofts_repository_code_layout_is_refused(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "microsoft-layout"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_florence2.Florence2ForConditionalGeneration"}
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "modeling_florence2.py").write_text("raise SystemExit('never run')\n")
    with pytest.raises(UnservableModel, match=r"repository-code layout.*florence-community/Florence-2-base-ft"):
        Florence2Adapter.load(load_context(copy))
    with pytest.raises(ValueError, match="num_beams"):
        Florence2Adapter.load(load_context(folder, num_beams=0))
    with pytest.raises(InvalidInput, match="answers no entities"):
        Florence2Adapter.load(load_context(folder, task="<MORE_DETAILED_CAPTION>"))


def entry(folder: Path) -> str:
    options = "".join(f"  {key}: {value!r}\n".replace("'", '"') for key, value in catalog_options().items())
    head = f"name: {TINY_FLORENCE2}\nadapter: florence2\nsource:\n  path: {folder}\n"
    return f"{head}tasks: [extract]\noptions:\n{options}"


async def test_the_app_answers_the_recorded_entities_and_objects(folder: Path, tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_FLORENCE2: entry(folder)}) as client:
        for case in [c for c in florence2_cases() if c["name"] in APP_CASES]:
            items = []
            for name in case["images"]:
                data, fmt = detection_images()[name]
                items.append({"images": [{"data": base64.b64encode(data).decode(), "format": fmt}]})
            params: dict[str, Any] = {"options": case["options"]}
            if case["instruction"]:
                params["instruction"] = case["instruction"]
            response = await client.post(
                f"/v1/extract/{TINY_FLORENCE2}", json={"items": items, "params": params}, headers=JSON
            )
            assert response.status_code == 200, response.text
            for index, (item, want) in enumerate(zip(response.json()["items"], recorded()[case["name"]], strict=True)):
                assert_answer(item, want, f"{case['name']}[{index}]")
        bad = await client.post(
            f"/v1/extract/{TINY_FLORENCE2}",
            json={"items": items[:1], "params": {"options": {"task": "<MORE_DETAILED_CAPTION>"}}},
            headers=JSON,
        )
        assert bad.status_code == 400
        assert bad.json()["detail"]["code"] == "INVALID_INPUT"
        text_only = await client.post(f"/v1/extract/{TINY_FLORENCE2}", json={"items": [{"text": "a"}]}, headers=JSON)
        assert text_only.status_code == 400
        assert "items[0]" in text_only.json()["detail"]["message"]
        listed = (await client.get(f"/v1/models/{TINY_FLORENCE2}")).json()
        assert listed["inputs"] == ["image"], listed
