"""ColVisionAdapter (adapter ``colpali-engine``) on a tiny random ColQwen2.5 in
colpali-engine's layout (a LoRA adapter folder over a ``ColQwen2_5`` base): page images
and text queries to multivectors, and MaxSim scores, equal within 1e-5 to colpali-engine's
own processor and model (recorded once, tests/adapters/parity/colvision_reference.json), in
process and over HTTP; answers that do not depend on what shares the forward; folders it
cannot serve refused at load; clear 4xx."""

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
from sift_server.adapters.base import EncodeTask, ScoreTask
from sift_server.adapters.colvision import ColVisionAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.multivector_tasks import (
    assert_close_vectors,
    decode_pages,
    pages_encode_task,
    pages_score_task,
    run,
)
from tests.adapters.parity.colvision_cases import EMBED_CASES, FIXTURE, SCORE_CASES, TOL, expected_items
from tests.fixtures.tiny_colpali import image_bytes
from tests.fixtures.tiny_colvision import (
    EMBEDDING_DIM,
    MAX_PIXELS,
    MIN_PIXELS,
    RESIZED_SPECS,
    TINY_COLQWEN2_5,
    build_tiny_colqwen2_5,
    colvision_images,
)

MODEL = TINY_COLQWEN2_5
BOUNDS = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}


def _unpack(packed: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"])


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())
    model = data["models"][MODEL]
    model["embed"] = {name: [_unpack(v) for v in vectors] for name, vectors in model["embed"].items()}
    data["resized_pages"] = [_unpack(v) for v in data["resized_pages"]]
    return data


def expected(case_name: str) -> list[Any]:
    case = next(case for case in EMBED_CASES if case["name"] == case_name)
    return expected_items(recorded()["models"][MODEL]["embed"], case)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_colqwen2_5(tmp_path_factory.mktemp("colvision"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColVisionAdapter:
    return ColVisionAdapter.load(load_context(folder, **BOUNDS))


@cache
def decoded_images() -> list[Any]:
    """The parity images as the service decodes them (service/images.py)."""
    return decode_pages(colvision_images())


def encode_task(case: dict[str, Any]) -> EncodeTask:
    return pages_encode_task(case, decoded_images())


def score_task(case: dict[str, Any]) -> ScoreTask:
    return pages_score_task(case, decoded_images())


def assert_vectors(got: list[np.ndarray], expected: list[Any]) -> None:
    assert_close_vectors(got, expected, TOL)


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_colpali_engine(adapter: ColVisionAdapter, case: dict[str, Any]) -> None:
    (items,) = run(adapter, encode_task(case))
    assert_vectors([item["multivector"] for item in items], expected(case["name"]))


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_colpali_engine(adapter: ColVisionAdapter, case: dict[str, Any]) -> None:
    (scores,) = run(adapter, score_task(case))
    np.testing.assert_allclose(scores, recorded()["models"][MODEL]["score"][case["name"]], atol=TOL, rtol=0)


def test_requests_sharing_a_forward_get_their_own_answers(adapter: ColVisionAdapter) -> None:
    """Queries of different lengths, pages of different sizes and scores fused in one forward per kind."""
    cases = {case["name"]: case for case in EMBED_CASES}
    names = ("queries", "two-pages", "mixed", "pages")
    fused = run(adapter, *(encode_task(cases[name]) for name in names))
    for name, items in zip(names, fused, strict=True):
        assert_vectors([item["multivector"] for item in items], expected(name))
    fused_scores = run(adapter, *(score_task(case) for case in SCORE_CASES))
    for case, scores in zip(SCORE_CASES, fused_scores, strict=True):
        np.testing.assert_allclose(scores, recorded()["models"][MODEL]["score"][case["name"]], atol=TOL, rtol=0)


def test_resized_pages_differ_only_by_the_resizer(adapter: ColVisionAdapter) -> None:
    """A page the processor resizes: Pillow here, torchvision in the recording; the same
    token count, vectors close (docs/models.md gives the figure)."""
    images = decode_pages(image_bytes(RESIZED_SPECS))
    (items,) = run(adapter, EncodeTask(texts=["", ""], images=[(images[0],), (images[1],)]))
    for item, want in zip(items, recorded()["resized_pages"], strict=True):
        assert item["multivector"].shape == np.asarray(want).shape
        np.testing.assert_allclose(item["multivector"], want, atol=0.05, rtol=0)


def test_info_bounds_and_costs(adapter: ColVisionAdapter, folder: Path) -> None:
    assert adapter.info.inputs == ("text", "image")
    assert adapter.info.outputs == ("multivector",)
    assert adapter.info.dims == {"multivector": EMBEDDING_DIM}
    assert adapter.info.tasks == frozenset({"encode", "score"})
    prepared = adapter.prepare(encode_task(EMBED_CASES[0]))
    # 56 × 56 is 4 image tokens, 112 × 84 is 12; the visual prompt is 27 tokens.
    assert prepared.item_costs == [31, 39, 33, 35]
    assert prepared.input_tokens == 0
    # Without the entry's bounds the saved processor's apply (at most 56 × 56 pixels: 2 to 4 tokens).
    unbounded = ColVisionAdapter.load(load_context(folder))
    assert unbounded.prepare(encode_task(EMBED_CASES[0])).item_costs == [31, 29, 29, 29]


def test_a_text_past_the_limit_is_refused_or_cut(folder: Path) -> None:
    adapter = ColVisionAdapter.load(load_context(folder, 24, **BOUNDS))
    long_query = EncodeTask(texts=["a long question " * 4], is_query=True, overflow="error")
    with pytest.raises(InputTooLong, match="at most 24"):
        adapter.prepare(long_query)
    cut = adapter.prepare(EncodeTask(texts=long_query.texts, is_query=True))
    assert cut.item_costs == [24]


def test_score_needs_candidates(adapter: ColVisionAdapter) -> None:
    with pytest.raises(InvalidInput):
        adapter.prepare(ScoreTask(query="q", texts=[]))


def test_folders_it_cannot_serve_exactly_are_refused(folder: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    shutil.copytree(folder.parent / "base", merged)
    with pytest.raises(UnservableModel, match="PEFT adapter config"):
        ColVisionAdapter.load(load_context(merged))
    hub_base = shutil.copytree(folder, tmp_path / "hub-base")
    config = json.loads((hub_base / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "vidore/colqwen2.5-base"
    (hub_base / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="not a local folder"):
        ColVisionAdapter.load(load_context(hub_base))
    # The base named by options.base instead (relative to the adapter folder) loads.
    shutil.copytree(folder.parent / "base", hub_base / "base")
    assert ColVisionAdapter.load(load_context(hub_base, base={"path": "base"})).info.dims == {"multivector": 128}
    other = shutil.copytree(folder.parent / "base", tmp_path / "other-base")
    base_config = json.loads((other / "config.json").read_text())
    base_config["model_type"] = "qwen2_vl"
    (other / "config.json").write_text(json.dumps(base_config))
    with pytest.raises(UnservableModel, match="not 'qwen2_vl'"):
        ColVisionAdapter.load(load_context(folder, base={"path": str(other)}))
    config["peft_type"] = "IA3"
    (hub_base / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="not a LoRA"):
        ColVisionAdapter.load(load_context(hub_base, base={"path": "base"}))


# ---- over HTTP ----------------------------------------------------------------------


JSON = {"Accept": "application/json"}


def _wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = colvision_images()
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": base64.b64encode(data[i]).decode(), "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


def _entry(folder: Path) -> str:
    return (
        f"adapter: colpali-engine\nsource:\n  path: {folder}\ntasks: [encode, score]\n"
        f"options:\n  min_pixels: {MIN_PIXELS}\n  max_pixels: {MAX_PIXELS}\n"
    )


async def test_http_encode_and_score_equal_colpali_engine(folder: Path, tmp_path: Path) -> None:
    async with serving_one_entry(tmp_path, MODEL, _entry(folder)) as client:
        info = (await client.get(f"/v1/models/{MODEL}")).json()
        answers = {}
        for case in EMBED_CASES:
            body = {
                "items": _wire(case["items"]),
                "params": {"output_types": ["multivector"], "options": {"is_query": case["is_query"]}},
            }
            response = await client.post(f"/v1/encode/{MODEL}", json=body, headers=JSON)
            assert response.status_code == 200, response.text
            answers[case["name"]] = response.json()
        scores = {}
        for case in SCORE_CASES:
            body = {
                "query": {"text": case["query"]},
                "items": [{"id": str(i), **item} for i, item in enumerate(_wire(case["items"]))],
            }
            response = await client.post(f"/v1/score/{MODEL}", json=body, headers=JSON)
            assert response.status_code == 200, response.text
            scores[case["name"]] = response.json()
        dense = await client.post(
            f"/v1/encode/{MODEL}", json={"items": [{"text": "q"}], "params": {"output_types": ["dense"]}}, headers=JSON
        )
        broken = await client.post(
            f"/v1/encode/{MODEL}",
            json={"items": [{"images": [{"data": base64.b64encode(b"not an image").decode(), "format": "png"}]}]},
            headers=JSON,
        )
    assert info["inputs"] == ["text", "image"]
    assert info["outputs"] == ["multivector", "score"]
    assert info["dims"] == {"multivector": EMBEDDING_DIM}
    for name, answer in answers.items():
        got = [np.asarray(item["multivector"]["values"], dtype=np.float32) for item in answer["items"]]
        assert_vectors(got, expected(name))
    for name, answer in scores.items():
        by_item = sorted(answer["scores"], key=lambda entry: int(entry["item_id"]))
        np.testing.assert_allclose(
            [entry["score"] for entry in by_item], recorded()["models"][MODEL]["score"][name], atol=TOL, rtol=0
        )
    assert dense.status_code == 400
    assert dense.json()["detail"]["code"] == "INVALID_INPUT"
    assert broken.status_code == 400
    assert broken.json()["detail"]["code"] == "INVALID_INPUT"


def test_the_published_weight_names_load_the_same_model(
    folder: Path, tmp_path: Path, adapter: ColVisionAdapter
) -> None:
    """vidore's base and adapter name the language model ``model.*`` (transformers 5:
    ``language_model.*``); read through colpali-engine's renaming, the LoRA still applies."""
    from safetensors.torch import load_file, save_file

    old = shutil.copytree(folder.parent, tmp_path / "published")
    for weights in (old / "adapter" / "adapter_model.safetensors", old / "base" / "model.safetensors"):
        renamed = {name.replace("language_model.", "model."): tensor for name, tensor in load_file(weights).items()}
        save_file(renamed, weights, metadata={"format": "pt"})
    published = ColVisionAdapter.load(load_context(old / "adapter", base={"path": "../base"}, **BOUNDS))
    case = EMBED_CASES[1]
    (items,) = run(published, encode_task(case))
    assert_vectors([item["multivector"] for item in items], expected(case["name"]))
