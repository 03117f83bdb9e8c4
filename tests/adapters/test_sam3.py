"""The SAM 3 adapter on the tiny model, in process and through the app, against the
released reference server's ``sam3`` adapter (sie-server 0.10.1, torchvision image
processor) recorded in tests/fixtures/sam3_parity.json (scripts/record_sam3_parity.py),
and the rules around it: the processor's pixels without torchvision, images of
requests with different labels in one vision forward, 400s for what it cannot take,
refusals at load."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import sift_server.adapters.sam3 as sam3_module
from sift_server.adapters._detection_rules import shrunk_size
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._sam3_rules import by_score, label_prompts, read_pixels_config, sam3_object
from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.sam3 import Sam3Adapter, sam3_pixels
from sift_server.errors import InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.test_clip import serving
from tests.fixtures.sam3_cases import FIXTURE, sam3_cases
from tests.fixtures.tiny_sam3 import SIDE, TINY_SAM3, build_tiny_sam3, sam3_images

RECORDED: dict[str, Any] = json.loads((Path(__file__).parents[1] / "fixtures" / FIXTURE).read_text())
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sam3(tmp_path_factory.mktemp("sam3") / "sam3")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Sam3Adapter:
    return Sam3Adapter.load(load_context(folder))


def _pil(name: str) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(sam3_images()[name][0])).convert("RGB")


def _task(case: dict[str, Any], images: list[str] | None = None) -> ExtractTask:
    names = images or case["images"]
    return ExtractTask(
        texts=[""] * len(names),
        # The service drops repeated labels before the adapter sees them.
        labels=tuple(dict.fromkeys(case["labels"])),
        options=case["options"],
        images=[(_pil(name),) for name in names],
    )


def assert_objects_equal(got: list[dict[str, Any]], want: list[dict[str, Any]], where: str) -> None:
    """Labels and integer boxes equal, in the same order; scores within 1e-5."""
    assert [o["label"] for o in got] == [o["label"] for o in want], where
    assert [o["bbox"] for o in got] == [o["bbox"] for o in want], where
    for index, (one, other) in enumerate(zip(got, want, strict=True)):
        assert one["score"] == pytest.approx(other["score"], abs=1e-5), (where, index)


def test_pixels_equal_the_torchvision_processors(folder: Path) -> None:
    """Shrink (beyond twice the side) then ``sam3_pixels``: what sie-server's
    preprocessor (``Sam3ImageProcessor`` on torchvision) computed, to the last bit."""
    spec = read_pixels_config(folder)
    for name in sam3_images():
        image = _pil(name)
        want = RECORDED["pixels"][name]
        assert list(image.size) == want["original_size"]
        size = shrunk_size(*image.size, 2 * SIDE)
        if size is not None:
            from PIL import Image

            image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        pixels = sam3_pixels(image, spec)
        assert list(pixels.shape) == want["shape"]
        flat = pixels.reshape(-1)
        assert [float(flat[index]) for index, _ in want["samples"]] == [value for _, value in want["samples"]], name
        assert float(pixels.double().sum()) == pytest.approx(want["sum"], abs=1e-6), name
        assert float(pixels.double().abs().sum()) == pytest.approx(want["abs_sum"], abs=1e-6), name


@pytest.mark.parametrize("case", sam3_cases(), ids=lambda case: case["name"])
def test_objects_equal_the_reference_servers(
    adapter: Sam3Adapter, case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    kept: list[dict[str, Any]] = []

    def recording(label: str, score: float, box: list[float], width: int, height: int) -> dict[str, Any]:
        kept.append({"label": label, "size": [width, height], "score": score, "box": box})
        return sam3_object(label, score, box, width, height)

    monkeypatch.setattr(sam3_module, "sam3_object", recording)
    prepared = adapter.prepare(_task(case))
    (outputs,) = adapter.forward([Part(prepared, 0, len(case["images"]))])
    want = RECORDED["cases"][case["name"]]
    for index, (result, objects) in enumerate(zip(outputs, want["objects"], strict=True)):
        assert set(result) == {"entities", "relations", "classifications", "objects", "data"}
        assert all(set(o) == {"label", "score", "bbox"} for o in result["objects"])
        assert all(isinstance(v, int) for o in result["objects"] for v in o["bbox"])
        assert_objects_equal(result["objects"], objects, f"{case['name']}[{index}]")
    # The unrounded boxes, before clipping: within 1e-3 px of the reference's (image-major here,
    # label-major there: compare as sets of (label, size) groups in order).
    reference = [
        {"label": pair["label"], "size": pair["size"], "score": score, "box": box}
        for pair in want["kept"]
        for score, box in zip(pair["scores"], pair["boxes"], strict=True)
    ]
    assert len(kept) == len(reference)

    def key(found: dict[str, Any]) -> tuple[str, int, int, float]:
        return (found["label"], *found["size"], round(found["score"], 4))

    for one, other in zip(sorted(kept, key=key), sorted(reference, key=key), strict=True):
        assert (one["label"], one["size"]) == (other["label"], other["size"])
        assert one["score"] == pytest.approx(other["score"], abs=1e-5)
        assert one["box"] == pytest.approx(other["box"], abs=1e-3)


def test_requests_with_other_labels_share_one_vision_forward(adapter: Sam3Adapter) -> None:
    """The vision tower does not read the labels: three images of two requests with
    different labels and thresholds run it once; each answers as it was recorded alone."""
    first_case, second_case = sam3_cases()[0], sam3_cases()[1]
    first = adapter.prepare(_task(first_case, ["exact_png"]))
    second = adapter.prepare(_task(second_case, ["wide_png", "exact_png"]))
    assert first.compat_key == second.compat_key
    calls: list[int] = []
    hook = adapter.model.vision_encoder.register_forward_pre_hook(lambda _m, args: calls.append(args[0].shape[0]))
    try:
        out = adapter.forward([Part(first, 0, 1), Part(second, 0, 2)])
    finally:
        hook.remove()
    assert calls == [3]
    images = first_case["images"]
    want_first = RECORDED["cases"]["default"]["objects"]
    want_second = RECORDED["cases"]["score_threshold"]["objects"]
    assert_objects_equal(out[0][0]["objects"], want_first[images.index("exact_png")], "first")
    assert_objects_equal(out[1][0]["objects"], want_second[images.index("wide_png")], "second[0]")
    assert_objects_equal(out[1][1]["objects"], want_second[images.index("exact_png")], "second[1]")


def test_several_pairs_per_detector_forward_answer_the_same(folder: Path) -> None:
    """The catalog's ``max_pairs_per_forward`` (the reference's load option) batches
    (image, label) pairs through the detector; the answers stay within tolerance."""
    batched = Sam3Adapter.load(load_context(folder, max_pairs_per_forward=4))
    case = next(c for c in sam3_cases() if c["name"] == "score_threshold")
    (outputs,) = batched.forward([Part(batched.prepare(_task(case)), 0, len(case["images"]))])
    for index, (result, want) in enumerate(zip(outputs, RECORDED["cases"][case["name"]]["objects"], strict=True)):
        assert_objects_equal(result["objects"], want, f"batched[{index}]")


def test_bad_requests_are_refused_by_name(adapter: Sam3Adapter) -> None:
    case = sam3_cases()[0]
    with pytest.raises(InvalidInput, match="labels"):
        adapter.prepare(_task({**case, "labels": []}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="'score_threshold'"):
        adapter.prepare(_task({**case, "options": {"score_threshold": 1.5}}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="'threshold'"):
        adapter.prepare(_task({**case, "options": {"threshold": "high"}}, ["wide_png"]))
    with pytest.raises(InvalidInput, match="has none"):
        adapter.prepare(ExtractTask(texts=["a cat"], labels=("cat",), images=[()]))
    with pytest.raises(InvalidInput, match=r"label 'cat cat.*' is 42 tokens; the text encoder takes at most 32"):
        adapter.prepare(_task({**case, "labels": ["cat " * 40]}, ["wide_png"]))


def test_the_rules() -> None:
    assert label_prompts([" Red Car ", "bus", " Red Car "]) == [(" Red Car ", "Red Car"), ("bus", "bus")]
    # Clipped to the image, then truncated toward zero (x + w never passes the width).
    assert sam3_object("cat", 0.5, [-3.2, 4.9, 90.5, 20.7], 83, 47)["bbox"] == [0, 4, 83, 15]
    assert sam3_object("cat", 0.5, [10.9, 50.0, 12.2, 60.0], 83, 47)["bbox"] == [10, 47, 1, 0]
    found = [{"score": 0.2, "label": "a"}, {"score": 0.5, "label": "b"}, {"score": 0.2, "label": "c"}]
    assert [o["label"] for o in by_score(found)] == ["b", "a", "c"]


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy


def _edit(path: Path, **changes: Any) -> None:
    saved = json.loads(path.read_text())
    for key, value in changes.items():
        # A nested config is edited in place, not replaced.
        saved[key] = saved[key] | value if isinstance(saved.get(key), dict) and key != "size" else value
    path.write_text(json.dumps(saved))


@pytest.mark.parametrize(
    ("file", "changes", "message"),
    [
        ("config.json", {"model_type": "sam2"}, "model_type 'sam2'"),
        ("config.json", {"text_config": {"max_position_embeddings": 16}}, "16 positions"),
        ("preprocessor_config.json", {"resample": 3}, "resamples with 3, not bilinear"),
        ("preprocessor_config.json", {"do_normalize": False}, "do_normalize"),
        ("preprocessor_config.json", {"do_pad": True}, "do_pad"),
        ("preprocessor_config.json", {"size": {"shortest_edge": 56}}, "not height × width"),
        ("preprocessor_config.json", {"image_processor_type": "SamImageProcessor"}, "SamImageProcessor"),
    ],
)
def test_a_folder_it_cannot_serve_exactly_is_refused_at_load(
    folder: Path, tmp_path: Path, file: str, changes: dict[str, Any], message: str
) -> None:
    copy = _copy(folder, tmp_path)
    _edit(copy / file, **changes)
    with pytest.raises(UnservableModel, match=message):
        Sam3Adapter.load(load_context(copy))


def test_a_folder_missing_weights_is_refused_at_load(folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    copy = _copy(folder, tmp_path)
    weights = load_file(copy / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("detr_decoder.")}, copy / "model.safetensors")
    with pytest.raises(UnservableModel, match="weights missing"):
        Sam3Adapter.load(load_context(copy))
    name = "text_projection.weight"
    save_file(weights | {name: weights[name][:, :16].contiguous()}, copy / "model.safetensors")
    with pytest.raises(UnservableModel, match="mismatched"):
        Sam3Adapter.load(load_context(copy))
    (copy / "preprocessor_config.json").unlink()
    with pytest.raises(UnservableModel, match=r"no preprocessor_config\.json"):
        Sam3Adapter.load(load_context(copy))


def _item(name: str) -> dict[str, Any]:
    data, fmt = sam3_images()[name]
    return {"images": [{"data": base64.b64encode(data).decode(), "format": fmt}]}


async def test_the_app_answers_the_recorded_objects_and_refuses_what_it_cannot_take(
    folder: Path, tmp_path: Path
) -> None:
    entry = f"name: {TINY_SAM3}\nadapter: sam3\nsource:\n  path: {folder}\ntasks: [extract]\n"
    async with serving(tmp_path, {TINY_SAM3: entry}, max_image_pixels=20_000) as client:
        url = f"/v1/extract/{TINY_SAM3}"
        for case in sam3_cases():
            names = [name for name in case["images"] if name != "large_png"]
            params = {"labels": case["labels"], "options": case["options"]}
            response = await client.post(url, json={"items": [_item(n) for n in names], "params": params}, headers=JSON)
            assert response.status_code == 200, response.text
            want = RECORDED["cases"][case["name"]]["objects"]
            for item, name in zip(response.json()["items"], names, strict=True):
                assert_objects_equal(item["objects"], want[case["images"].index(name)], f"{case['name']}:{name}")
        refusals = [
            ({"items": [_item("wide_png")], "params": {}}, "labels"),
            ({"items": [{"text": "a cat"}], "params": {"labels": ["cat"]}}, "items[0]"),
            ({"items": [_item("large_png")], "params": {"labels": ["cat"]}}, "pixels"),
            ({"items": [_item("wide_png")], "params": {"labels": [f"l{i}" for i in range(1001)]}}, "1000"),
            ({"items": [_item("wide_png")], "params": {"labels": ["cat " * 40]}}, "42 tokens"),
        ]
        for body, message in refusals:
            response = await client.post(url, json=body, headers=JSON)
            assert response.status_code == 400, (message, response.text)
            assert message in response.json()["detail"]["message"], response.text
        listed = (await client.get(f"/v1/models/{TINY_SAM3}")).json()
        assert listed["inputs"] == ["image"], listed
        assert listed["tasks"] == ["extract"], listed
