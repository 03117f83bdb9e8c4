"""The ``colpali-engine`` adapter on a tiny random colSmol (colpali-engine's ``ColIdefics3``
layout: a LoRA adapter folder over a ``ColIdefics3`` base): page images and text queries to
multivectors, and MaxSim scores, equal within 1e-5 to colpali-engine's own processor and model
(recorded once, tests/adapters/parity/colsmol_reference.json), in process and over HTTP;
answers that do not depend on what shares the forward; the torchvision resize's difference
bounded; a LoRA that does not fit refused at load; clear 4xx."""

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
from sift_server.adapters.colvision import ColIdefics3Adapter, ColVisionAdapter
from sift_server.errors import InputTooLong
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.multivector_tasks import (
    assert_close_vectors,
    decode_pages,
    pages_encode_task,
    pages_score_task,
    run,
)
from tests.adapters.parity.colsmol_cases import EMBED_CASES, FIXTURE, SCORE_CASES, TOL, expected_items
from tests.fixtures.tiny_colsmol import (
    EMBEDDING_DIM,
    RESIZED_PAGES,
    TINY_COLSMOL,
    build_tiny_colsmol,
    colsmol_images,
)

MODEL = TINY_COLSMOL


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
    return build_tiny_colsmol(tmp_path_factory.mktemp("colsmol"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColVisionAdapter:
    return ColVisionAdapter.load(load_context(folder))


@cache
def decoded_images() -> list[Any]:
    """The parity images as the service decodes them (service/images.py)."""
    return decode_pages(colsmol_images())


def encode_task(case: dict[str, Any]) -> EncodeTask:
    return pages_encode_task(case, decoded_images())


def score_task(case: dict[str, Any]) -> ScoreTask:
    return pages_score_task(case, decoded_images())


def assert_vectors(got: list[np.ndarray], expected: list[Any]) -> None:
    assert_close_vectors(got, expected, TOL)


def test_loads_colpali_engines_idefics3_class(adapter: ColVisionAdapter) -> None:
    assert isinstance(adapter, ColIdefics3Adapter)
    assert type(adapter.model).__name__ == "ColIdefics3"
    assert adapter.info.inputs == ("text", "image")
    assert adapter.info.outputs == ("multivector",)
    assert adapter.info.dims == {"multivector": EMBEDDING_DIM}


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_colpali_engine(adapter: ColVisionAdapter, case: dict[str, Any]) -> None:
    (items,) = run(adapter, encode_task(case))
    assert_vectors([item["multivector"] for item in items], expected(case["name"]))


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_colpali_engine(adapter: ColVisionAdapter, case: dict[str, Any]) -> None:
    (scores,) = run(adapter, score_task(case))
    np.testing.assert_allclose(scores, recorded()["models"][MODEL]["score"][case["name"]], atol=TOL, rtol=0)


def test_requests_sharing_a_forward_get_their_own_answers(adapter: ColVisionAdapter) -> None:
    """Queries of different lengths, pages of different tile counts and scores fused in one forward per kind."""
    cases = {case["name"]: case for case in EMBED_CASES}
    names = ("queries", "two-pages", "mixed", "pages")
    fused = run(adapter, *(encode_task(cases[name]) for name in names))
    for name, items in zip(names, fused, strict=True):
        assert_vectors([item["multivector"] for item in items], expected(name))
    fused_scores = run(adapter, *(score_task(case) for case in SCORE_CASES))
    for case, scores in zip(SCORE_CASES, fused_scores, strict=True):
        np.testing.assert_allclose(scores, recorded()["models"][MODEL]["score"][case["name"]], atol=TOL, rtol=0)


def test_pages_differ_from_torchvisions_only_by_the_resizer(adapter: ColVisionAdapter) -> None:
    """colpali-engine's own processor resizes pages with torchvision, Sift with Pillow: the same
    token count, vectors close (docs/models.md gives the figure)."""
    images = decoded_images()
    (items,) = run(adapter, EncodeTask(texts=["", ""], images=[(images[i],) for i in RESIZED_PAGES]))
    for item, want in zip(items, recorded()["resized_pages"], strict=True):
        assert item["multivector"].shape == np.asarray(want).shape
        np.testing.assert_allclose(item["multivector"], want, atol=0.05, rtol=0)


def test_costs_follow_the_tiles(adapter: ColVisionAdapter) -> None:
    prepared = adapter.prepare(encode_task(EMBED_CASES[0]))
    # The prompt's 35 tokens; a tile's marker, row/column tag and 4 image tokens (6), a newline
    # after each row; the whole page: a newline, marker, tag, 4 image tokens, marker (8).
    # 2 × 2 tiles: 35 + 26 + 8; 2 × 1: 35 + 13 + 8; 1 × 2: 35 + 14 + 8.
    assert prepared.item_costs == [69, 56, 57, 69]
    assert prepared.input_tokens == 0
    query = adapter.prepare(EncodeTask(texts=["a chart"], is_query=True))
    assert query.item_costs == [17]  # 7 byte tokens and ten <end_of_utterance>
    assert query.input_tokens == 17


def test_a_text_past_the_limit_is_refused_or_cut(folder: Path) -> None:
    adapter = ColVisionAdapter.load(load_context(folder, 24))
    long_query = EncodeTask(texts=["a long question " * 4], is_query=True, overflow="error")
    with pytest.raises(InputTooLong, match="at most 24"):
        adapter.prepare(long_query)
    assert adapter.prepare(EncodeTask(texts=long_query.texts, is_query=True)).item_costs == [24]


def test_a_lora_that_does_not_fit_the_base_is_refused(folder: Path, tmp_path: Path) -> None:
    """PEFT would load it with a warning and serve the base alone."""
    from safetensors.torch import load_file, save_file

    moved = shutil.copytree(folder.parent, tmp_path / "moved")
    weights = moved / "adapter" / "adapter_model.safetensors"
    renamed = {name.replace("text_model", "language_model"): t for name, t in load_file(weights).items()}
    save_file(renamed, weights, metadata={"format": "pt"})
    with pytest.raises(UnservableModel, match="does not fit the base"):
        ColVisionAdapter.load(load_context(moved / "adapter", base={"path": "../base"}))


# ---- over HTTP ----------------------------------------------------------------------


JSON = {"Accept": "application/json"}


def _wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = colsmol_images()
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": base64.b64encode(data[i]).decode(), "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


async def test_http_encode_and_score_equal_colpali_engine(folder: Path, tmp_path: Path) -> None:
    entry = f"adapter: colpali-engine\nsource:\n  path: {folder}\ntasks: [encode, score]\n"
    async with serving_one_entry(tmp_path, MODEL, entry) as client:
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
