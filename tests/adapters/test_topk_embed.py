"""TopkEmbedAdapter (adapter ``topk-embed``) on a tiny random TopK-Embed folder: text
queries, text documents and page images to multivectors, and MaxSim scores, equal within
1e-5 to the reference server's own ``topk_embed`` adapter (sie-server 0.10.1, recorded once:
tests/adapters/parity/topk_reference.json), in process and over HTTP; answers that do not
depend on what shares the forward; folders it cannot serve refused at load; clear 4xx."""

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
from sift_server.adapters.topk_embed import TopkEmbedAdapter, smart_resize
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.multivector_tasks import (
    assert_close_vectors,
    decode_pages,
    pages_encode_task,
    pages_score_task,
    run,
)
from tests.adapters.parity.topk_cases import EMBED_CASES, FIXTURE, MODEL, SCORE_CASES, TOL
from tests.fixtures.tiny_topk import DOCUMENT_LENGTH, HEAD_DIM, QUERY_LENGTH, build_tiny_topk, topk_images

CASES = {case["name"]: case for case in EMBED_CASES}


def _unpack(packed: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"])


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())
    for key in ("embed", "alone"):
        data[key] = {name: [_unpack(v) for v in vectors] for name, vectors in data[key].items()}
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_topk(tmp_path_factory.mktemp("topk") / "model")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> TopkEmbedAdapter:
    return TopkEmbedAdapter.load(load_context(folder))


@cache
def pages() -> list[Any]:
    return decode_pages(topk_images())


def encode_task(case: dict[str, Any], **extra: Any) -> EncodeTask:
    return pages_encode_task(case, pages(), **case["options"], **extra)


def test_the_recording_answers_each_row_as_it_answers_it_alone() -> None:
    """The reference's batches do not change a row's answer, so any fused batch of Sift's may be compared."""
    for name, vectors in recorded()["embed"].items():
        assert_close_vectors(vectors, recorded()["alone"][name], TOL)


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_the_reference(adapter: TopkEmbedAdapter, case: dict[str, Any]) -> None:
    (items,) = run(adapter, encode_task(case))
    assert_close_vectors([item["multivector"] for item in items], recorded()["embed"][case["name"]], TOL)


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_the_reference(adapter: TopkEmbedAdapter, case: dict[str, Any]) -> None:
    (scores,) = run(adapter, pages_score_task(case, pages()))
    np.testing.assert_allclose(scores, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_requests_sharing_a_forward_get_their_own_answers(adapter: TopkEmbedAdapter) -> None:
    """Queries, documents, pages, normalised and not, and scores, fused in one forward per kind."""
    fused = run(adapter, *(encode_task(case) for case in EMBED_CASES))
    for case, items in zip(EMBED_CASES, fused, strict=True):
        assert_close_vectors([item["multivector"] for item in items], recorded()["embed"][case["name"]], TOL)
    scores = run(adapter, *(pages_score_task(case, pages()) for case in SCORE_CASES))
    for case, got in zip(SCORE_CASES, scores, strict=True):
        np.testing.assert_allclose(got, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_what_yields_vectors(adapter: TopkEmbedAdapter) -> None:
    """Every query token; a text document's tokens but its punctuation; a page's image tokens only."""
    (queries,) = run(adapter, EncodeTask(texts=["a, b."], is_query=True))
    (documents,) = run(adapter, EncodeTask(texts=["a, b."]))
    # The tiny tokenizer is byte-level: "Query: a, b." is 12 tokens, "Document: a, b." 15, less "," and ".".
    assert len(queries[0]["multivector"]) == 12
    assert len(documents[0]["multivector"]) == 13
    (page,) = run(adapter, pages_encode_task({"items": [{"images": [2]}], "is_query": False}, pages()))
    assert page[0]["multivector"].shape == (12, HEAD_DIM)  # 128 × 96 pixels: 8 × 6 patches, merged 2 × 2
    np.testing.assert_allclose(np.linalg.norm(page[0]["multivector"], axis=1), 1.0, atol=1e-6)


def test_info_limits_and_costs(adapter: TopkEmbedAdapter, folder: Path) -> None:
    assert adapter.info.inputs == ("text", "image")
    assert adapter.info.outputs == ("multivector",)
    assert adapter.info.dims == {"multivector": HEAD_DIM}
    assert adapter.info.tasks == frozenset({"encode", "score"})
    assert adapter.info.max_sequence_length == DOCUMENT_LENGTH
    prepared = adapter.prepare(encode_task(CASES["pages"]))
    # The image prompt is 10 tokens around the page's merged patches (4, 6, 12 and 10).
    assert prepared.item_costs == [14, 16, 22, 20]
    assert prepared.input_tokens == 0
    assert TopkEmbedAdapter.load(load_context(folder, 40)).info.max_sequence_length == 40
    assert TopkEmbedAdapter.load(load_context(folder, token_dim=8)).info.dims == {"multivector": 8}


def test_past_the_caps_a_text_is_refused_or_cut(adapter: TopkEmbedAdapter) -> None:
    long = "a long text of many words " * 10
    with pytest.raises(InputTooLong, match=f"at most {QUERY_LENGTH}"):
        adapter.prepare(EncodeTask(texts=[long], is_query=True, overflow="error"))
    with pytest.raises(InputTooLong, match=f"at most {DOCUMENT_LENGTH}"):
        adapter.prepare(EncodeTask(texts=[long * 2], overflow="error"))
    assert adapter.prepare(EncodeTask(texts=[long], is_query=True)).item_costs == [QUERY_LENGTH]
    assert adapter.prepare(EncodeTask(texts=[long * 2])).item_costs == [DOCUMENT_LENGTH]


def test_requests_it_cannot_answer_are_400(adapter: TopkEmbedAdapter) -> None:
    with pytest.raises(InvalidInput, match="instructions are not supported"):
        adapter.prepare(EncodeTask(texts=["q"], is_query=True, instruction="Find it"))
    with pytest.raises(InvalidInput, match="instructions are not supported"):
        adapter.prepare(ScoreTask(query="q", texts=["d"], instruction="Find it"))
    with pytest.raises(InvalidInput, match="queries are text"):
        adapter.prepare(pages_encode_task({"items": [{"text": "q", "images": [0]}], "is_query": True}, pages()))
    with pytest.raises(InvalidInput, match="'normalize' must be true or false"):
        adapter.prepare(EncodeTask(texts=["q"], options={"normalize": "no"}))
    with pytest.raises(InvalidInput, match="at least one item"):
        adapter.prepare(ScoreTask(query="q", texts=[]))
    with pytest.raises(InvalidInput, match="aspect ratio"):
        smart_resize(10, 3000, factor=32, min_pixels=4096, max_pixels=65536)


def test_smart_resize_keeps_the_bounds() -> None:
    assert smart_resize(64, 96, factor=32, min_pixels=4096, max_pixels=65536) == (64, 96)
    assert smart_resize(30, 30, factor=32, min_pixels=4096, max_pixels=65536) == (64, 64)
    height, width = smart_resize(1000, 700, factor=32, min_pixels=4096, max_pixels=65536)
    assert height % 32 == width % 32 == 0 and height * width <= 65536


def test_folders_it_cannot_serve_exactly_are_refused(folder: Path, tmp_path: Path) -> None:
    def variant(name: str, edit: Any) -> Path:
        copy = shutil.copytree(folder, tmp_path / name)
        config = json.loads((copy / "config.json").read_text())
        edit(config)
        (copy / "config.json").write_text(json.dumps(config))
        return copy

    def plain_qwen3_5(config: dict[str, Any]) -> None:
        for key in ("dim", "output_dim", "normalize", "query_template", "document_prompt", "image_token_budget"):
            config.pop(key)
        config.pop("scoring_skip_ids")

    plain = variant("plain", plain_qwen3_5)
    with pytest.raises(UnservableModel, match="TopK-Embed folders"):
        TopkEmbedAdapter.load(load_context(plain))
    other = variant("other", lambda c: c["text_config"].update(model_type="qwen3_next"))
    with pytest.raises(UnservableModel, match="qwen3_5 backbone, not 'qwen3_next'"):
        TopkEmbedAdapter.load(load_context(other))
    wider = variant("wider", lambda c: c["text_config"].update(intermediate_size=96))
    with pytest.raises(UnservableModel, match="does not match Qwen3_5Model"):
        TopkEmbedAdapter.load(load_context(wider))
    from safetensors.torch import load_file, save_file

    headless = shutil.copytree(folder, tmp_path / "headless")
    weights = {k: v for k, v in load_file(headless / "model.safetensors").items() if k != "head.weight"}
    save_file(weights, headless / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnservableModel, match=r"no head\.weight"):
        TopkEmbedAdapter.load(load_context(headless))
    with pytest.raises(UnservableModel, match=r"no config\.json"):
        TopkEmbedAdapter.load(load_context(tmp_path))


# ---- over HTTP ----------------------------------------------------------------------

JSON = {"Accept": "application/json"}


def _wire(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = topk_images()
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": base64.b64encode(data[i]).decode(), "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


async def test_http_encode_and_score_equal_the_reference(folder: Path, tmp_path: Path) -> None:
    entry = f"adapter: topk-embed\nsource:\n  path: {folder}\ntasks: [encode, score]\n"
    async with serving_one_entry(tmp_path, MODEL, entry) as client:
        info = (await client.get(f"/v1/models/{MODEL}")).json()
        answers = {}
        for case in EMBED_CASES:
            options = {"is_query": case["is_query"], **case["options"]}
            body = {"items": _wire(case["items"]), "params": {"output_types": ["multivector"], "options": options}}
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
        instructed = await client.post(
            f"/v1/encode/{MODEL}", json={"items": [{"text": "q"}], "params": {"instruction": "Find"}}, headers=JSON
        )
        image_query = await client.post(
            f"/v1/encode/{MODEL}",
            json={"items": _wire([{"images": [0]}]), "params": {"options": {"is_query": True}}},
            headers=JSON,
        )
    assert info["inputs"] == ["text", "image"]
    assert info["outputs"] == ["multivector", "score"]
    assert info["dims"] == {"multivector": HEAD_DIM}
    for name, answer in answers.items():
        got = [np.asarray(item["multivector"]["values"], dtype=np.float32) for item in answer["items"]]
        assert_close_vectors(got, recorded()["embed"][name], TOL)
    for name, answer in scores.items():
        by_item = sorted(answer["scores"], key=lambda entry: int(entry["item_id"]))
        np.testing.assert_allclose([e["score"] for e in by_item], recorded()["score"][name], atol=TOL, rtol=0)
    for response in (dense, instructed, image_query):
        assert response.status_code == 400, response.text
        assert response.json()["detail"]["code"] == "INVALID_INPUT"
