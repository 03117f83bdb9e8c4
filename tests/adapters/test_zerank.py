"""zerank-2 under ``llm-reranker`` with ``input_format: zerank``, on a tiny random Qwen3 causal
LM in zerank-2's sentence-transformers CrossEncoder layout (tests/fixtures/tiny_decoder.py):
equal within 1e-5 to sie-server 0.10.1's own answers (its ``native_causal_cross_encoder``
adapter, recorded once through sie-sdk by scripts/record_zerank_parity.py), its refusals
(an instruction, a row over the limit) the reference's, and a folder of another stack refused
at load."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import Part, ScoreTask
from sift_server.adapters.llm_reranker import LlmRerankerAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.parity.decoder_cases import (
    ZERANK_FIXTURE,
    ZERANK_MAX_SEQ,
    ZERANK_RERANKER,
    ZERANK_SCORE_CASES,
    zerank_entry,
)
from tests.adapters.parity.decoder_compare import score_body
from tests.fixtures.tiny_decoder import build_tiny_qwen3_reranker, build_tiny_zerank

TOL = 1e-5
ANSWERED = [
    case
    for case in ZERANK_SCORE_CASES
    if isinstance(case, dict) and case["name"] in {"pairs", "unicode", "max-seq-length"}
]
REFUSED = {"instruction": InvalidInput, "too-long": InputTooLong, "too-long-for-the-option": InputTooLong}


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / ZERANK_FIXTURE).read_text())
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_zerank(tmp_path_factory.mktemp("zerank"))


@pytest.fixture(scope="module")
def reranker(folder: Path) -> LlmRerankerAdapter:
    return LlmRerankerAdapter.load(load_context(folder, ZERANK_MAX_SEQ, input_format="zerank"))


def task(case: dict[str, Any]) -> ScoreTask:
    return ScoreTask(
        query=case["query"], texts=case["texts"], instruction=case.get("instruction"), options=case.get("options", {})
    )


def score(adapter: LlmRerankerAdapter, case: dict[str, Any]) -> list[float]:
    prepared = adapter.prepare(task(case))
    (scores,) = adapter.forward([Part(prepared, 0, len(prepared.item_costs))])
    return scores


def test_the_recorded_cases_are_the_ones_asked() -> None:
    assert set(recorded()["score"]) == {case["name"] for case in ZERANK_SCORE_CASES}
    assert {case["name"] for case in ANSWERED} | set(REFUSED) == set(recorded()["score"])


@pytest.mark.parametrize("case", ANSWERED, ids=lambda case: case["name"])
def test_zerank_equals_the_reference_server(reranker: LlmRerankerAdapter, case: dict[str, Any]) -> None:
    np.testing.assert_allclose(score(reranker, case), recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_pairs_of_every_case_share_one_forward_and_still_equal_the_reference(reranker: LlmRerankerAdapter) -> None:
    parts = [reranker.prepare(task(case)) for case in ANSWERED]
    got = reranker.forward([Part(prepared, 0, len(prepared.item_costs)) for prepared in parts])
    for case, scores in zip(ANSWERED, got, strict=True):
        np.testing.assert_allclose(scores, recorded()["score"][case["name"]], atol=TOL, rtol=0)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_reference_refuses_is_refused(reranker: LlmRerankerAdapter, name: str) -> None:
    (case,) = [case for case in ZERANK_SCORE_CASES if case["name"] == name]
    assert "error" in recorded()["score"][name]
    with pytest.raises(REFUSED[name]):
        reranker.prepare(task(case))


def test_the_cases_are_not_vacuous(reranker: LlmRerankerAdapter) -> None:
    scores = recorded()["score"]["pairs"]
    assert len(set(np.round(scores, 4))) == len(scores)
    assert all(s < 0.0 for s in scores)  # raw logits, not probabilities
    # Each row is the chat template's whole rendering, the query in the system turn.
    case = ANSWERED[0]
    rows = reranker.prepare(task(case)).payload
    encode = reranker.prompt.tokenizer.encode
    head = encode(f"<|im_start|>system\n{case['query']}<|im_end|>\n", add_special_tokens=False)
    assert rows[0][: len(head)] == head
    assert rows[0][-3:] == encode("<|im_start|>assistant\n", add_special_tokens=False)[-3:]


@pytest.mark.parametrize("value", [0, 257, "64", True])
def test_a_bad_max_seq_length_option_is_refused(reranker: LlmRerankerAdapter, value: object) -> None:
    case = {**ANSWERED[0], "options": {"max_seq_length": value}}
    with pytest.raises(InvalidInput, match="max_seq_length"):
        reranker.prepare(task(case))


def _variant(folder: Path, tmp_path: Path, path: str, change: dict[str, Any] | None, text: str | None = None) -> Path:
    copy = Path(shutil.copytree(folder, tmp_path / "variant"))
    target = copy / path
    if text is not None:
        target.write_text(text)
    else:
        assert change is not None
        target.write_text(json.dumps({**json.loads(target.read_text()), **change}))
    return copy


@pytest.mark.parametrize(
    ("path", "change", "text", "reason"),
    [
        (
            "config_sentence_transformers.json",
            {"activation_fn": "torch.nn.modules.activation.Sigmoid"},
            None,
            "activation",
        ),
        ("1_LogitScore/config.json", {"false_token_id": 5}, None, "false token"),
        ("1_LogitScore/config.json", {"true_token_id": 99999}, None, "outside the vocabulary"),
        ("sentence_bert_config.json", {"processing_kwargs": {}}, None, "processing_kwargs"),
        ("modules.json", None, json.dumps([{"idx": 0, "type": "sentence_transformers.models.Transformer"}]), "modules"),
        ("chat_template.jinja", None, "{% for m in messages %}{{ m.content }}{% endfor %}", "chat template"),
    ],
)
def test_another_stack_is_refused_at_load(
    folder: Path, tmp_path: Path, path: str, change: dict[str, Any] | None, text: str | None, reason: str
) -> None:
    copy = _variant(folder, tmp_path, path, change, text)
    with pytest.raises(ValueError, match=reason):
        LlmRerankerAdapter.load(load_context(copy, ZERANK_MAX_SEQ, input_format="zerank"))


def test_the_zerank_folder_is_refused_under_the_other_formats(folder: Path) -> None:
    for input_format in ("qwen3", "mxbai"):
        with pytest.raises(UnservableModel, match="input_format: zerank"):
            LlmRerankerAdapter.load(load_context(folder, ZERANK_MAX_SEQ, input_format=input_format))


def test_a_qwen3_reranker_folder_is_refused_under_zerank(tmp_path: Path) -> None:
    plain = build_tiny_qwen3_reranker(tmp_path / "qwen3")
    with pytest.raises(UnservableModel, match=r"modules\.json"):
        LlmRerankerAdapter.load(load_context(plain, 512, input_format="zerank"))


async def test_zerank_answers_the_reference_over_http_from_its_catalog_entry(folder: Path, tmp_path: Path) -> None:
    json_only = {"Accept": "application/json"}
    async with serving_one_entry(tmp_path, ZERANK_RERANKER, zerank_entry(str(folder))) as client:
        answers = {}
        for case in ZERANK_SCORE_CASES:
            body = {**score_body(case), **({"options": case["options"]} if "options" in case else {})}
            answers[case["name"]] = await client.post(f"/v1/score/{ZERANK_RERANKER}", headers=json_only, json=body)
    for case in ANSWERED:
        response = answers[case["name"]]
        assert response.status_code == 200, response.text
        got = {int(s["item_id"]): s["score"] for s in response.json()["scores"]}
        want = recorded()["score"][case["name"]]
        np.testing.assert_allclose([got[i] for i in range(len(want))], want, atol=TOL, rtol=0)
    for name, error in REFUSED.items():
        response = answers[name]
        assert response.status_code == 400, response.text
        code = "INPUT_TOO_LONG" if error is InputTooLong else "INVALID_INPUT"
        assert code in response.text
