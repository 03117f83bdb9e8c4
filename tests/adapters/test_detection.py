"""The OWLv2 and Grounding DINO adapters on the tiny models, in process and through
the app, against transformers' own answers recorded in
tests/fixtures/detection_parity.json (scripts/record_detection_parity.py), and the
rules around them: images of several requests in one forward, 400s for what an
image model cannot read."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._detection_rules import canonical_label, grounding_prompt, shrunk_size, wire_bbox
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.detection import GroundingDinoAdapter, Owlv2Adapter
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.test_clip import serving
from tests.fixtures.detection_cases import detection_cases, image_bytes
from tests.fixtures.tiny_detection import (
    TINY_GROUNDING_DINO,
    TINY_OWLV2,
    build_tiny_grounding_dino,
    build_tiny_owlv2,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "detection_parity.json"
ADAPTERS = {TINY_OWLV2: Owlv2Adapter, TINY_GROUNDING_DINO: GroundingDinoAdapter}
JSON = {"Accept": "application/json"}
RECORD_NAMES = {TINY_OWLV2: "owlv2", TINY_GROUNDING_DINO: "grounding-dino"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("detection-models")
    return {TINY_OWLV2: build_tiny_owlv2(root / "owlv2"), TINY_GROUNDING_DINO: build_tiny_grounding_dino(root / "gd")}


@pytest.fixture(scope="module")
def adapters(folders: dict[str, Path]) -> dict[str, Any]:
    return {name: ADAPTERS[name].load(load_context(folder)) for name, folder in folders.items()}


def recorded() -> dict[str, list[list[dict[str, Any]]]]:
    answers: dict[str, list[list[dict[str, Any]]]] = json.loads(FIXTURE.read_text())["answers"]
    return answers


def _pil(name: str) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(image_bytes(name)[0])).convert("RGB")


def _task(case: dict[str, Any], images: list[str] | None = None) -> ExtractTask:
    names = images or case["images"]
    return ExtractTask(
        texts=[""] * len(names),
        labels=tuple(case["labels"]),
        instruction=case["instruction"],
        options=case["options"],
        images=[(_pil(name),) for name in names],
    )


def _near_boundary(value: float) -> bool:
    return abs(value - round(value)) < 1e-3


def assert_objects_equal(got: list[dict[str, Any]], want: list[dict[str, Any]], where: str) -> None:
    """Labels equal, scores within 1e-5, boxes as the wire carries them (integers,
    truncated as the reference does): equal, or one apart where the recorded
    coordinate lies within 1e-3 of an integer (the truncation could fall either way)."""
    assert [o["label"] for o in got] == [o["label"] for o in want], where
    for index, (one, other) in enumerate(zip(got, want, strict=True)):
        assert one["score"] == pytest.approx(other["score"], abs=1e-5), (where, index)
        x1, y1, x2, y2 = other["box"]
        exact = wire_bbox(other["box"])
        for got_value, want_value, raw in zip(one["bbox"], exact, (x1, y1, x2 - x1, y2 - y1), strict=True):
            allowed = 1 if _near_boundary(raw) else 0
            assert abs(got_value - want_value) <= allowed, (where, index, one["bbox"], exact)


@pytest.mark.parametrize("case", detection_cases(), ids=lambda case: case["name"])
def test_objects_equal_transformers_own_answers(adapters: dict[str, Any], case: dict[str, Any]) -> None:
    adapter = adapters[case["model"]]
    prepared = adapter.prepare(_task(case))
    (outputs,) = adapter.forward([Part(prepared, 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, recorded()[case["name"]], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert all(set(o) == {"label", "score", "bbox"} for o in result["objects"])
        assert all(isinstance(v, int) for o in result["objects"] for v in o["bbox"])
        assert_objects_equal(result["objects"], want, f"{case['name']}[{index}]")


@pytest.mark.parametrize("model", [TINY_OWLV2, TINY_GROUNDING_DINO])
def test_images_of_concurrent_requests_share_one_forward(adapters: dict[str, Any], model: str) -> None:
    """Two requests with the same prompt, fused by the engine: OWLv2 runs its model
    once for both; Grounding DINO once per processed size (same-size images here)."""
    adapter = adapters[model]
    case = next(c for c in detection_cases() if c["model"] == model and not c["options"] and c["labels"])
    first = adapter.prepare(_task(case, ["square_jpeg"]))
    second = adapter.prepare(_task(case, ["square_jpeg", "square_jpeg"]))
    assert first.compat_key == second.compat_key
    calls: list[int] = []
    hook = adapter.model.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(kwargs["pixel_values"].shape[0]), with_kwargs=True
    )
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    assert calls == [3]
    want = recorded()[case["name"]][case["images"].index("square_jpeg")]
    for result in (out[0][0], out[1][0], out[1][1]):
        assert_objects_equal(result["objects"], want, case["name"])


def test_requests_with_other_labels_or_thresholds_differ_in_key_or_answer(adapters: dict[str, Any]) -> None:
    owl = adapters[TINY_OWLV2]
    case = detection_cases()[0]
    base = owl.prepare(_task(case, ["wide_png"]))
    other_labels = owl.prepare(_task({**case, "labels": ["bird"]}, ["wide_png"]))
    assert base.compat_key != other_labels.compat_key
    strict = owl.prepare(_task({**case, "options": {"score_threshold": 0.99}}, ["wide_png"]))
    # Same queries: one forward, each request post-processed with its own threshold.
    assert strict.compat_key == base.compat_key
    loose, tight = owl.forward([Part(base, 0, 1), Part(strict, 0, 1)])
    assert len(tight[0]["objects"]) < len(loose[0]["objects"])
    assert all(o["score"] > 0.99 for o in tight[0]["objects"])


def test_grounding_dino_mixed_sizes_answer_as_each_image_alone(adapters: dict[str, Any]) -> None:
    adapter = adapters[TINY_GROUNDING_DINO]
    case = next(c for c in detection_cases() if c["name"] == "grounding-dino:default")
    calls: list[tuple[int, ...]] = []
    hook = adapter.model.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(tuple(kwargs["pixel_values"].shape)), with_kwargs=True
    )
    try:
        (outputs,) = adapter.forward([Part(adapter.prepare(_task(case)), 0, 4)])
    finally:
        hook.remove()
    assert len(calls) == len({shape[1:] for shape in calls}) == 4
    for result, want in zip(outputs, recorded()[case["name"]], strict=True):
        assert_objects_equal(result["objects"], want, case["name"])


def test_bad_requests_are_refused_by_name(adapters: dict[str, Any]) -> None:
    owl, gd = adapters[TINY_OWLV2], adapters[TINY_GROUNDING_DINO]
    case = detection_cases()[0]
    with pytest.raises(InvalidInput, match="labels"):
        owl.prepare(_task({**case, "labels": []}, ["wide_png"]))
    with pytest.raises(InvalidInput, match=r"labels.*or an instruction"):
        gd.prepare(_task({**case, "labels": []}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="'score_threshold'"):
        owl.prepare(_task({**case, "options": {"score_threshold": 2}}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="'text_threshold'"):
        gd.prepare(_task({**case, "options": {"text_threshold": "high"}}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="has none"):
        owl.prepare(ExtractTask(texts=["a"], labels=("cat",), images=[()]))


def test_the_rules() -> None:
    assert grounding_prompt([" Cat ", "Red Car"], None) == "cat. red car."
    assert grounding_prompt([], "  Find A Dog ") == "find a dog."
    assert grounding_prompt([], "a dog.") == "a dog."
    assert shrunk_size(150, 90, 64) == (64, 38)
    assert shrunk_size(64, 10, 64) is None
    assert wire_bbox([-26.5, 3.9, 26.5, 10.2]) == [-26, 3, 53, 6]
    assert canonical_label("leather handbag", ["Red Leather Handbag", "dog"]) == "Red Leather Handbag"
    # A full match beats a partial one; then the label explaining more of the phrase.
    assert canonical_label("leather handbag", ["Red Leather Handbag", "handbag"]) == "handbag"
    assert canonical_label("red handbag", ["handbag", "red handbag"]) == "red handbag"
    assert canonical_label("[SEP]", ["cat"]) == "[SEP]"
    assert canonical_label("cat. dog. [SEP]", ["cat", "dog"]) == "cat"


def _entry(model: str, folder: Path) -> str:
    return f"name: {model}\nadapter: {RECORD_NAMES[model]}\nsource:\n  path: {folder}\ntasks: [extract]\n"


async def test_the_app_answers_the_recorded_objects_and_refuses_text_items(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import base64

    entries = {model: _entry(model, folder) for model, folder in folders.items()}
    async with serving(tmp_path, entries) as client:
        for case in detection_cases():
            items = []
            for name in case["images"]:
                data, fmt = image_bytes(name)
                items.append({"images": [{"data": base64.b64encode(data).decode(), "format": fmt}]})
            params: dict[str, Any] = {"labels": case["labels"], "options": case["options"]}
            if case["instruction"]:
                params["instruction"] = case["instruction"]
            response = await client.post(
                f"/v1/extract/{case['model']}", json={"items": items, "params": params}, headers=JSON
            )
            assert response.status_code == 200, response.text
            for index, (item, want) in enumerate(zip(response.json()["items"], recorded()[case["name"]], strict=True)):
                assert_objects_equal(item["objects"], want, f"{case['name']}[{index}]")
        text_only = await client.post(
            f"/v1/extract/{TINY_OWLV2}",
            json={"items": [{"text": "a cat"}], "params": {"labels": ["cat"]}},
            headers=JSON,
        )
        assert text_only.status_code == 400
        assert "items[0]" in text_only.json()["detail"]["message"]
        for model in (TINY_OWLV2, TINY_GROUNDING_DINO):
            listed = (await client.get(f"/v1/models/{model}")).json()
            assert listed["inputs"] == ["image"], listed
            assert listed["tasks"] == ["extract"], listed


def test_owlv2_loads_after_the_lean_import_of_transformers(folders: dict[str, Path]) -> None:
    """A serving process imports transformers with SciPy hidden (adapters/_lean_imports.py);
    OWLv2's image processor still resizes with it (a fresh process, as a server starts)."""
    import subprocess
    import sys

    script = (
        "import sys; from pathlib import Path\n"
        "from sift_server.adapters._lean_imports import import_transformers_models\n"
        "import_transformers_models()\n"
        "from sift_server.adapters.base import ExtractTask, LoadContext\n"
        "from sift_server.adapters.detection import Owlv2Adapter\n"
        "from PIL import Image\n"
        "ctx = LoadContext(path=Path(sys.argv[1]), options={'device': 'cpu'},"
        " max_sequence_length=None, torch_threads=1)\n"
        "adapter = Owlv2Adapter.load(ctx)\n"
        "task = ExtractTask(texts=[''], labels=('cat',), images=[(Image.new('RGB', (20, 10)),)])\n"
        "print(adapter.prepare(task).payload.images[0].pixels.shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(folders[TINY_OWLV2])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("(3, 32, 32)")
