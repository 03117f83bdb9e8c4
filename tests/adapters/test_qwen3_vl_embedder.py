"""Qwen3VLEmbedderAdapter on a tiny random Qwen3-VL: texts, images and both to dense
vectors equal within 1e-5 to transformers' own classes called as the reference server
calls them (recorded once, tests/adapters/parity/qwen3_vl_reference.json), in process and
over HTTP; answers that do not depend on what shares the forward; folders it cannot serve
refused at load; clear 4xx."""

from __future__ import annotations

import base64
import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask, Part, ScoreTask, TaskInput
from sift_server.adapters.qwen3_vl_embedder import Qwen3VLEmbedderAdapter, normalize_instruction
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.parity.qwen3_vl_cases import EMBED_CASES, FIXTURE, TOL
from tests.fixtures.tiny_colpali import image_bytes
from tests.fixtures.tiny_qwen3_vl import HIDDEN, TINY_QWEN3_VL_EMBEDDER, build_tiny_qwen3_vl_embedder

MODEL = TINY_QWEN3_VL_EMBEDDER


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())["models"][MODEL]
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_vl_embedder(tmp_path_factory.mktemp("qwen3_vl") / "embedder")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Qwen3VLEmbedderAdapter:
    return Qwen3VLEmbedderAdapter.load(load_context(folder))


@cache
def decoded_images() -> list[Any]:
    """The parity images as the service decodes them (service/images.py)."""
    from sift_server.service.images import RawImage, decode_image

    return [decode_image(RawImage(data, "png", f"image {i}"), 50_000_000) for i, data in enumerate(image_bytes())]


def encode_task(case: dict[str, Any], **fields: Any) -> EncodeTask:
    """The task service/encode builds from the case's request."""
    images = decoded_images()
    return EncodeTask(
        texts=[item.get("text", "") for item in case["items"]],
        images=[tuple(images[i] for i in item.get("images", [])) for item in case["items"]],
        instruction=case.get("instruction"),
        **fields,
    )


def run(adapter: Qwen3VLEmbedderAdapter, *tasks: TaskInput) -> list[list[Any]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def assert_vectors(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected)
    for vector, want in zip(got, expected, strict=True):
        assert np.asarray(vector).shape == (HIDDEN,)
        np.testing.assert_allclose(vector, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_transformers(adapter: Qwen3VLEmbedderAdapter, case: dict[str, Any]) -> None:
    (items,) = run(adapter, encode_task(case))
    assert_vectors([item["dense"] for item in items], recorded()["encode"][case["name"]])


def test_requests_sharing_a_forward_get_their_own_answers(adapter: Qwen3VLEmbedderAdapter) -> None:
    """Every case fused in one forward (texts and images, left-padded together)."""
    fused = run(adapter, *(encode_task(case) for case in EMBED_CASES))
    for case, items in zip(EMBED_CASES, fused, strict=True):
        assert_vectors([item["dense"] for item in items], recorded()["encode"][case["name"]])


def test_instruction_shaping() -> None:
    assert normalize_instruction("  Find the page  ") == "Find the page."
    assert normalize_instruction("Find the page?") == "Find the page?"
    assert normalize_instruction("   ") == ""


def test_info_costs_and_tasks(adapter: Qwen3VLEmbedderAdapter) -> None:
    assert adapter.info.inputs == ("text", "image")
    assert adapter.info.outputs == ("dense",)
    assert adapter.info.dims == {"dense": HIDDEN}
    prepared = adapter.prepare(encode_task(EMBED_CASES[2]))  # an image and a text; then a text
    assert prepared.item_costs[0] > prepared.item_costs[1]
    # Only the text-only item's tokens count as text tokens.
    assert prepared.input_tokens == prepared.item_costs[1]
    with pytest.raises(InvalidInput):
        adapter.prepare(ScoreTask(query="q", texts=["d"]))


def test_a_prompt_past_the_limit_is_refused_or_cut(folder: Path) -> None:
    adapter = Qwen3VLEmbedderAdapter.load(load_context(folder, 40))
    long_text = EncodeTask(texts=["a long document " * 4], overflow="error")
    with pytest.raises(InputTooLong, match="at most 40"):
        adapter.prepare(long_text)
    assert adapter.prepare(EncodeTask(texts=long_text.texts)).item_costs == [40]
    # An image's tokens are never cut: a prompt with images past the limit is refused.
    with pytest.raises(InputTooLong, match="images"):
        adapter.prepare(encode_task(EMBED_CASES[1]))


def test_folders_it_cannot_serve_exactly_are_refused(folder: Path, tmp_path: Path) -> None:
    other = shutil.copytree(folder, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    config["model_type"] = "qwen2_5_vl"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="not 'qwen2_5_vl'"):
        Qwen3VLEmbedderAdapter.load(load_context(other))
    config["model_type"] = "qwen3_vl"
    config["auto_map"] = {"AutoModel": "modeling.Model"}
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="repository code"):
        Qwen3VLEmbedderAdapter.load(load_context(other))
    del config["auto_map"]
    (other / "config.json").write_text(json.dumps(config))
    (other / "preprocessor_config.json").unlink()
    with pytest.raises(UnservableModel, match="no image processor"):
        Qwen3VLEmbedderAdapter.load(load_context(other))
    with pytest.raises(ValueError, match="pooling"):
        Qwen3VLEmbedderAdapter.load(load_context(folder, pooling="cls"))


# ---- over HTTP ----------------------------------------------------------------------


JSON = {"Accept": "application/json"}


def wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = image_bytes()
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": base64.b64encode(data[i]).decode(), "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


async def test_http_encode_equals_transformers(folder: Path, tmp_path: Path) -> None:
    entry = f"adapter: qwen3-vl-embedder\nsource:\n  path: {folder}\ntasks: [encode]\n"
    async with serving_one_entry(tmp_path, MODEL, entry) as client:
        info = (await client.get(f"/v1/models/{MODEL}")).json()
        answers = {}
        for case in EMBED_CASES:
            params: dict[str, Any] = {"output_types": ["dense"]}
            if case.get("instruction"):
                params["instruction"] = case["instruction"]
            response = await client.post(
                f"/v1/encode/{MODEL}", json={"items": wire(case["items"]), "params": params}, headers=JSON
            )
            assert response.status_code == 200, response.text
            answers[case["name"]] = response.json()
        sparse = await client.post(
            f"/v1/encode/{MODEL}", json={"items": [{"text": "q"}], "params": {"output_types": ["sparse"]}}, headers=JSON
        )
        broken = await client.post(
            f"/v1/encode/{MODEL}",
            json={"items": [{"images": [{"data": base64.b64encode(b"not an image").decode(), "format": "png"}]}]},
            headers=JSON,
        )
    assert info["inputs"] == ["text", "image"]
    assert info["dims"] == {"dense": HIDDEN}
    for name, answer in answers.items():
        got = [np.asarray(item["dense"]["values"], dtype=np.float32) for item in answer["items"]]
        assert_vectors(got, recorded()["encode"][name])
    assert sparse.status_code == 400
    assert sparse.json()["detail"]["code"] == "INVALID_INPUT"
    assert broken.status_code == 400
    assert broken.json()["detail"]["code"] == "INVALID_INPUT"
