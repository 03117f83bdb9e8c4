"""Qwen3VLRerankerAdapter on a tiny random Qwen3-VL: a text query against text, image and
text-with-image candidates, scores equal within 1e-5 to transformers' own classes called
as the reference server calls them (recorded once, tests/adapters/parity/qwen3_vl_reference.json),
the candidate text trimmed past the limit as the reference trims it, in process and over
HTTP; answers that do not depend on what shares the forward; clear 4xx."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask, Part, ScoreTask, TaskInput
from sift_server.adapters.qwen3_vl_reranker import Qwen3VLRerankerAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.parity.qwen3_vl_cases import FIXTURE, LONG_TEXT, SCORE_CASES, TOL
from tests.adapters.test_qwen3_vl_embedder import decoded_images, wire
from tests.fixtures.tiny_qwen3_vl import TINY_QWEN3_VL_RERANKER, build_tiny_qwen3_vl_reranker

MODEL = TINY_QWEN3_VL_RERANKER


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())["models"][MODEL]
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_vl_reranker(tmp_path_factory.mktemp("qwen3_vl") / "reranker")


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Qwen3VLRerankerAdapter:
    return Qwen3VLRerankerAdapter.load(load_context(folder))


def score_task(case: dict[str, Any], **fields: Any) -> ScoreTask:
    images = decoded_images()
    options = {"max_seq_length": case["max_seq_length"]} if "max_seq_length" in case else {}
    return ScoreTask(
        query=case["query"],
        texts=[item.get("text", "") for item in case["items"]],
        images=[tuple(images[i] for i in item.get("images", [])) for item in case["items"]],
        instruction=case.get("instruction"),
        options=options,
        **fields,
    )


def run(adapter: Qwen3VLRerankerAdapter, *tasks: TaskInput) -> list[list[Any]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_transformers(adapter: Qwen3VLRerankerAdapter, case: dict[str, Any]) -> None:
    (scores,) = run(adapter, score_task(case))
    np.testing.assert_allclose(scores, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_requests_sharing_a_forward_get_their_own_answers(adapter: Qwen3VLRerankerAdapter) -> None:
    fused = run(adapter, *(score_task(case) for case in SCORE_CASES))
    for case, scores in zip(SCORE_CASES, fused, strict=True):
        np.testing.assert_allclose(scores, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_the_long_candidate_is_trimmed_to_the_limit(adapter: Qwen3VLRerankerAdapter) -> None:
    case = next(case for case in SCORE_CASES if case["name"] == "trimmed")
    prepared = adapter.prepare(score_task(case))
    assert prepared.item_costs[0] == case["max_seq_length"]
    assert prepared.item_costs[2] == case["max_seq_length"]
    assert prepared.item_costs[1] < case["max_seq_length"]
    with pytest.raises(InputTooLong, match="at most 480"):
        adapter.prepare(score_task(case, overflow="error"))
    with pytest.raises(InputTooLong, match="and image"):
        adapter.prepare(score_task({**case, "max_seq_length": 420}))


def test_bad_inputs_are_refused(adapter: Qwen3VLRerankerAdapter) -> None:
    images = decoded_images()
    refused = [
        ScoreTask(query="q", texts=[]),
        ScoreTask(query="  ", texts=["d"]),
        ScoreTask(query="q", texts=["  "]),
        ScoreTask(query="q", texts=["d"], images=[(images[0], images[1])]),
        ScoreTask(query="q", texts=["d <|im_end|> x"]),
        ScoreTask(query="q <|image_pad|>", texts=["d"]),
        ScoreTask(query="q", texts=["d"], options={"max_seq_length": 0}),
        EncodeTask(texts=["d"]),
    ]
    for task in refused:
        with pytest.raises(InvalidInput):
            adapter.prepare(task)
    assert adapter.info.tasks == frozenset({"score"})
    assert adapter.info.inputs == ("text", "image")


def test_folders_it_cannot_serve_exactly_are_refused(folder: Path, tmp_path: Path) -> None:
    other = shutil.copytree(folder, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    config["model_type"] = "qwen2_vl"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnservableModel, match="not 'qwen2_vl'"):
        Qwen3VLRerankerAdapter.load(load_context(other))
    # The image processor may come from another folder (the base model's).
    base = tmp_path / "base"
    base.mkdir()
    (other / "config.json").write_text((folder / "config.json").read_text())
    shutil.move(other / "preprocessor_config.json", base / "preprocessor_config.json")
    with pytest.raises(UnservableModel, match="no image processor"):
        Qwen3VLRerankerAdapter.load(load_context(other))
    loaded = Qwen3VLRerankerAdapter.load(load_context(other, processor="../base"))
    (scores,) = run(loaded, score_task(SCORE_CASES[0]))
    np.testing.assert_allclose(scores, recorded()["score"][SCORE_CASES[0]["name"]], atol=TOL, rtol=0)
    # Without "yes" as one token the answer cannot be read.
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"].pop("yes")
    tokenizer["model"]["merges"] = [m for m in tokenizer["model"]["merges"] if m not in (["ye", "s"], "ye s")]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(UnservableModel, match="'yes'"):
        Qwen3VLRerankerAdapter.load(load_context(other, processor="../base"))


async def test_http_score_equals_transformers(folder: Path, tmp_path: Path) -> None:
    entry = f"adapter: qwen3-vl-reranker\nsource:\n  path: {folder}\ntasks: [score]\n"
    json_headers = {"Accept": "application/json"}
    async with serving_one_entry(tmp_path, MODEL, entry) as client:
        info = (await client.get(f"/v1/models/{MODEL}")).json()
        answers = {}
        for case in SCORE_CASES:
            body: dict[str, Any] = {
                "query": {"text": case["query"]},
                "items": [{"id": str(i), **item} for i, item in enumerate(wire(case["items"]))],
            }
            if case.get("instruction"):
                body["instruction"] = case["instruction"]
            if "max_seq_length" in case:
                body["options"] = {"max_seq_length": case["max_seq_length"]}
            response = await client.post(f"/v1/score/{MODEL}", json=body, headers=json_headers)
            assert response.status_code == 200, response.text
            answers[case["name"]] = response.json()
        two_images = await client.post(
            f"/v1/score/{MODEL}",
            json={"query": {"text": "q"}, "items": wire([{"images": [0, 1]}])},
            headers=json_headers,
        )
        too_long = await client.post(
            f"/v1/score/{MODEL}",
            json={"query": {"text": "q"}, "items": [{"text": LONG_TEXT * 2}], "options": {"max_seq_length": 300}},
            headers=json_headers,
        )
        texts = SCORE_CASES[0]
        cohere = await client.post(
            "/v1/rerank",
            json={"model": MODEL, "query": texts["query"], "documents": [item["text"] for item in texts["items"]]},
        )
    assert info["inputs"] == ["text", "image"]
    # The Cohere-shaped route answers the same scores, best first.
    assert cohere.status_code == 200, cohere.text
    by_index = {result["index"]: result["relevance_score"] for result in cohere.json()["results"]}
    np.testing.assert_allclose([by_index[i] for i in range(3)], recorded()["score"]["texts"], atol=TOL, rtol=0)
    for name, answer in answers.items():
        by_item = sorted(answer["scores"], key=lambda entry: int(entry["item_id"]))
        np.testing.assert_allclose([entry["score"] for entry in by_item], recorded()["score"][name], atol=TOL, rtol=0)
    assert two_images.status_code == 400
    assert two_images.json()["detail"]["code"] == "INVALID_INPUT"
    assert too_long.status_code == 200
