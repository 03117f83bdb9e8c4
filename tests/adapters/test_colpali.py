"""ColPaliAdapter on a tiny random ColPali (PaliGemma) and ColQwen2 (Qwen2-VL): page
images and text queries to multivectors, and MaxSim scores, equal within 1e-5 to
transformers' own classes called as the reference server calls them (ColQwen2's model answers:
colpali-engine's ``ColQwen2`` on the same weights, whose image tokens get 2-D positions; recorded
once, tests/adapters/parity/colpali_reference.json), in process and over HTTP; answers that do
not depend on what shares the forward; folders it cannot serve refused at load; clear 4xx."""

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
from sift_server.adapters.colpali import ColPaliAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.multivector_tasks import (
    assert_close_vectors,
    decode_pages,
    pages_encode_task,
    pages_score_task,
    run,
)
from tests.adapters.parity.colpali_cases import EMBED_CASES, FIXTURE, MODELS, SCORE_CASES, TOL
from tests.fixtures.tiny_colpali import (
    EMBEDDING_DIM,
    QUERIES,
    TINY_COLPALI,
    TINY_COLQWEN2,
    build_tiny_colpali,
    build_tiny_colqwen2,
    image_bytes,
)


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())["models"]
    return data


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colpali")
    return {TINY_COLPALI: build_tiny_colpali(root / "colpali"), TINY_COLQWEN2: build_tiny_colqwen2(root / "colqwen2")}


@pytest.fixture(scope="module")
def adapters(folders: dict[str, Path]) -> dict[str, ColPaliAdapter]:
    return {name: ColPaliAdapter.load(load_context(folder)) for name, folder in folders.items()}


@cache
def decoded_images() -> list[Any]:
    """The parity images as the service decodes them (service/images.py)."""
    return decode_pages(image_bytes())


def encode_task(case: dict[str, Any], **options: Any) -> EncodeTask:
    return pages_encode_task(case, decoded_images(), **options)


def score_task(case: dict[str, Any]) -> ScoreTask:
    return pages_score_task(case, decoded_images())


def assert_vectors(got: list[np.ndarray], expected: list[Any]) -> None:
    assert_close_vectors(got, expected, TOL)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_transformers(adapters: dict[str, ColPaliAdapter], model: str, case: dict[str, Any]) -> None:
    (items,) = run(adapters[model], encode_task(case))
    assert_vectors([item["multivector"] for item in items], recorded()[model]["embed"][case["name"]])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_transformers(adapters: dict[str, ColPaliAdapter], model: str, case: dict[str, Any]) -> None:
    (scores,) = run(adapters[model], score_task(case))
    np.testing.assert_allclose(scores, recorded()[model]["score"][case["name"]], atol=TOL, rtol=0)


@pytest.mark.parametrize("model", MODELS)
def test_requests_sharing_a_forward_get_their_own_answers(adapters: dict[str, ColPaliAdapter], model: str) -> None:
    """Every case's requests (encode and score alike) fused in one forward per kind."""
    cases = {case["name"]: case for case in EMBED_CASES}
    fused = run(adapters[model], *(encode_task(cases[name]) for name in ("queries", "two-pages", "mixed")))
    for name, items in zip(("queries", "two-pages", "mixed"), fused, strict=True):
        assert_vectors([item["multivector"] for item in items], recorded()[model]["embed"][name])
    fused_scores = run(adapters[model], *(score_task(case) for case in SCORE_CASES))
    for case, scores in zip(SCORE_CASES, fused_scores, strict=True):
        np.testing.assert_allclose(scores, recorded()[model]["score"][case["name"]], atol=TOL, rtol=0)


def test_info_and_costs(adapters: dict[str, ColPaliAdapter]) -> None:
    adapter = adapters[TINY_COLPALI]
    assert adapter.info.inputs == ("text", "image")
    assert adapter.info.outputs == ("multivector",)
    assert adapter.info.dims == {"multivector": EMBEDDING_DIM}
    assert adapter.info.tasks == frozenset({"encode", "score"})
    prepared = adapter.prepare(encode_task(EMBED_CASES[2]))  # two-pages: 2 images, then 1
    # An image costs its sequence (4 image tokens and the 19-token visual prompt); it reads no text tokens.
    assert prepared.item_costs == [46, 23]
    assert prepared.input_tokens == 0


def test_a_text_past_the_limit_is_refused_or_cut(folders: dict[str, Path]) -> None:
    adapter = ColPaliAdapter.load(load_context(folders[TINY_COLQWEN2], 24))
    long_query = EncodeTask(texts=["a long question " * 4], is_query=True, overflow="error")
    with pytest.raises(InputTooLong, match="at most 24"):
        adapter.prepare(long_query)
    cut = adapter.prepare(EncodeTask(texts=long_query.texts, is_query=True))
    assert cut.item_costs == [24]


def test_score_needs_candidates(adapters: dict[str, ColPaliAdapter]) -> None:
    with pytest.raises(InvalidInput):
        adapters[TINY_COLPALI].prepare(ScoreTask(query="q", texts=[]))


def test_folders_it_cannot_serve_exactly_are_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    peft = shutil.copytree(folders[TINY_COLPALI], tmp_path / "peft")
    (peft / "adapter_config.json").write_text('{"base_model_name_or_path": "vidore/colpaligemma-3b-pt-448-base"}')
    with pytest.raises(UnservableModel, match="PEFT adapter"):
        ColPaliAdapter.load(load_context(peft))
    other = shutil.copytree(folders[TINY_COLQWEN2], tmp_path / "qwen25")
    config = json.loads((other / "config.json").read_text())
    config["vlm_config"]["model_type"] = "qwen2_5_vl"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="qwen2_vl backbone"):
        ColPaliAdapter.load(load_context(other))
    config["model_type"] = "idefics3"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="not 'idefics3'"):
        ColPaliAdapter.load(load_context(other))


# ---- over HTTP ----------------------------------------------------------------------


JSON = {"Accept": "application/json"}


def _wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = image_bytes()
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": base64.b64encode(data[i]).decode(), "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


def _entry(folder: Path) -> str:
    return f"adapter: colpali\nsource:\n  path: {folder}\ntasks: [encode, score]\n"


@pytest.mark.parametrize("model", MODELS)
async def test_http_encode_and_score_equal_transformers(folders: dict[str, Path], tmp_path: Path, model: str) -> None:
    async with serving_one_entry(tmp_path, model, _entry(folders[model])) as client:
        info = (await client.get(f"/v1/models/{model}")).json()
        answers = {}
        for case in EMBED_CASES:
            body = {
                "items": _wire(case["items"]),
                "params": {"output_types": ["multivector"], "options": {"is_query": case["is_query"]}},
            }
            response = await client.post(f"/v1/encode/{model}", json=body, headers=JSON)
            assert response.status_code == 200, response.text
            answers[case["name"]] = response.json()
        scores = {}
        for case in SCORE_CASES:
            body = {
                "query": {"text": case["query"]},
                "items": [{"id": str(i), **item} for i, item in enumerate(_wire(case["items"]))],
            }
            response = await client.post(f"/v1/score/{model}", json=body, headers=JSON)
            assert response.status_code == 200, response.text
            scores[case["name"]] = response.json()
        dense = await client.post(
            f"/v1/encode/{model}", json={"items": [{"text": "q"}], "params": {"output_types": ["dense"]}}, headers=JSON
        )
    assert info["inputs"] == ["text", "image"]
    assert info["outputs"] == ["multivector", "score"]
    assert info["dims"] == {"multivector": EMBEDDING_DIM}
    for name, answer in answers.items():
        got = [np.asarray(item["multivector"]["values"], dtype=np.float32) for item in answer["items"]]
        assert_vectors(got, recorded()[model]["embed"][name])
    for name, answer in scores.items():
        by_item = sorted(answer["scores"], key=lambda entry: int(entry["item_id"]))
        np.testing.assert_allclose(
            [entry["score"] for entry in by_item], recorded()[model]["score"][name], atol=TOL, rtol=0
        )
    assert dense.status_code == 400
    assert dense.json()["detail"]["code"] == "INVALID_INPUT"


async def test_http_refuses_a_broken_image_and_serves_the_rest(folders: dict[str, Path], tmp_path: Path) -> None:
    async with serving_one_entry(tmp_path, TINY_COLPALI, _entry(folders[TINY_COLPALI])) as client:
        broken: dict[str, Any] = {
            "items": [{"images": [{"data": base64.b64encode(b"not an image").decode(), "format": "png"}]}],
            "params": {"output_types": ["multivector"]},
        }
        refused = await client.post(f"/v1/encode/{TINY_COLPALI}", json=broken, headers=JSON)
        score_refused = await client.post(
            f"/v1/score/{TINY_COLPALI}", json={"query": {"text": QUERIES[0]}, "items": broken["items"]}, headers=JSON
        )
        fine = await client.post(
            f"/v1/encode/{TINY_COLPALI}",
            json={"items": _wire([{"images": [0]}]), "params": {"output_types": ["multivector"]}},
            headers=JSON,
        )
    assert refused.status_code == 400
    assert refused.json()["detail"]["code"] == "INVALID_INPUT"
    assert "items[0].images[0]" in refused.json()["detail"]["message"]
    assert score_refused.status_code == 400
    assert fine.status_code == 200
    assert_vectors(
        [np.asarray(fine.json()["items"][0]["multivector"]["values"], dtype=np.float32)],
        recorded()[TINY_COLPALI]["embed"]["pages"][:1],
    )
