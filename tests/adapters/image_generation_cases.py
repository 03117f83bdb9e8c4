"""What the tests of the image-to-text adapters share (GLM-OCR, MinerU2.5, PaddleOCR-VL and
LightOnOCR-2; Florence-2 reads its answers and pages the same way): the recorded answers, the
test pages as PIL images, a case's ``ExtractTask``, a catalog entry, a checkpoint with one
weight dropped, and a case sent through the app."""

from __future__ import annotations

import base64
import io
import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters.base import ExtractTask
from tests.fixtures.tiny_detection import detection_images

if TYPE_CHECKING:
    import httpx

JSON = {"Accept": "application/json"}


def recorded_answers(fixture: Path) -> dict[str, list[dict[str, Any]]]:
    """The reference's answers per case name, as the recording script wrote them."""
    answers: dict[str, list[dict[str, Any]]] = json.loads(fixture.read_text())["answers"]
    return answers


def page(name: str) -> Any:
    """One of the test pages (tests/fixtures/tiny_detection.py) as an RGB PIL image."""
    from PIL import Image

    return Image.open(io.BytesIO(detection_images()[name][0])).convert("RGB")


def page_task(case: Mapping[str, Any], images: list[str] | None = None) -> ExtractTask:
    """The extract task of a recorded case: its pages (or ``images``), instruction and options."""
    names = images or case["images"]
    return ExtractTask(
        texts=[""] * len(names),
        labels=(),
        instruction=case["instruction"],
        options=case["options"],
        images=[(page(name),) for name in names],
    )


def case_named(cases: Iterable[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(case for case in cases if case["name"] == name)


def catalog_entry(name: str, adapter: str, folder: Path, options: Mapping[str, Any]) -> str:
    """A catalog entry serving ``folder`` (each option as JSON, which YAML reads as written)."""
    lines = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in options.items())
    return f"name: {name}\nadapter: {adapter}\nsource:\n  path: {folder}\ntasks: [extract]\noptions:\n{lines}"


def without_one_weight(folder: Path, copy: Path) -> Path:
    """A copy of ``folder`` whose checkpoint lacks one norm weight (a load must refuse it)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, copy)
    weights = load_file(copy / "model.safetensors")
    del weights[next(name for name in sorted(weights) if "norm" in name)]
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def with_one_weight_reshaped(folder: Path, copy: Path) -> Path:
    """A copy of ``folder`` whose checkpoint holds one matrix of another shape (a load must refuse it)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, copy)
    weights = load_file(copy / "model.safetensors")
    name = next(name for name in sorted(weights) if weights[name].dim() == 2 and weights[name].shape[1] > 1)
    weights[name] = weights[name][:, :-1].contiguous()
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def image_items(names: Iterable[str]) -> list[dict[str, Any]]:
    """Wire items of one test page each, base64 in JSON."""
    items = []
    for name in names:
        data, fmt = detection_images()[name]
        items.append({"images": [{"data": base64.b64encode(data).decode(), "format": fmt}]})
    return items


async def post_case(client: httpx.AsyncClient, model: str, case: Mapping[str, Any]) -> httpx.Response:
    """A recorded case sent to ``/v1/extract``: one item per page, its options and instruction."""
    params: dict[str, Any] = {"options": case["options"]}
    if case["instruction"]:
        params["instruction"] = case["instruction"]
    body = {"items": image_items(case["images"]), "params": params}
    return await client.post(f"/v1/extract/{model}", json=body, headers=JSON)


def retyped(folder: Path, copy: Path, model_type: str) -> Path:
    """A copy of ``folder`` whose config names another ``model_type`` (a load must refuse it)."""
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = model_type
    (copy / "config.json").write_text(json.dumps(config))
    return copy


async def assert_app_answers(
    client: httpx.AsyncClient, model: str, cases: Iterable[Mapping[str, Any]], answers: Mapping[str, Any]
) -> None:
    """Each case sent through the app answers the recorded entities, page by page."""
    for case in cases:
        response = await post_case(client, model, case)
        assert response.status_code == 200, response.text
        for index, (item, want) in enumerate(zip(response.json()["items"], answers[case["name"]], strict=True)):
            assert item["entities"] == want["entities"], f"{case['name']}[{index}]"


async def post_options(client: httpx.AsyncClient, model: str, image: str, options: Mapping[str, Any]) -> httpx.Response:
    """One page with request ``options``, to see them refused."""
    body = {"items": image_items([image]), "params": {"options": dict(options)}}
    return await client.post(f"/v1/extract/{model}", json=body, headers=JSON)
