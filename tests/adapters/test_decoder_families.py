"""The reference catalog's other decoder families on tiny random models of their
architectures (tests/fixtures/tiny_decoder.py), equal within 1e-5 to the reference's
answers recorded once (scripts/record_decoder_families_parity.py):

- a Mistral-family embedder (Linq-Embed-Mistral, SFR-Embedding, e5-mistral) under
  ``decoder-embedder`` with ``append_eos``: sentence-transformers' encode of the texts the
  reference server builds (its template, then ``</s>``);
- an mxbai-rerank-v2 reranker under ``llm-reranker`` with ``input_format: mxbai``: the
  mxbai-rerank library's own ``predict`` (logit("1") - logit("0"))."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask, Part, ScoreTask
from sift_server.adapters.decoder_embedder import DecoderEmbedderAdapter
from sift_server.adapters.llm_reranker import LlmRerankerAdapter
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.parity.decoder_cases import (
    FAMILIES_FIXTURE,
    MAX_SEQ,
    MISTRAL_EMBED_CASES,
    MISTRAL_EMBEDDER,
    MISTRAL_INSTRUCTION,
    MXBAI_RERANKER,
    MXBAI_SCORE_CASES,
    TEXTS,
    mistral_embedder_entry,
    mxbai_reranker_entry,
)
from tests.adapters.parity.decoder_compare import encode_body, score_body
from tests.fixtures.tiny_decoder import (
    MISTRAL_QUERY_TEMPLATE,
    build_tiny_mistral_embedder,
    build_tiny_mxbai_reranker,
    build_tiny_qwen3_reranker,
)

TOL = 1e-5


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "parity" / FAMILIES_FIXTURE).read_text())
    return data


@pytest.fixture(scope="module")
def mistral_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_mistral_embedder(tmp_path_factory.mktemp("mistral_embedder"))


@pytest.fixture(scope="module")
def embedder(mistral_folder: Path) -> DecoderEmbedderAdapter:
    context = load_context(
        mistral_folder,
        MAX_SEQ,
        query_template=MISTRAL_QUERY_TEMPLATE,
        default_instruction=MISTRAL_INSTRUCTION,
        append_eos=True,
        normalize=True,
    )
    return DecoderEmbedderAdapter.load(context)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> LlmRerankerAdapter:
    folder = build_tiny_mxbai_reranker(tmp_path_factory.mktemp("mxbai_reranker"))
    return LlmRerankerAdapter.load(load_context(folder, 512, input_format="mxbai"))


def encode(adapter: DecoderEmbedderAdapter, case: dict[str, Any]) -> list[np.ndarray]:
    task = EncodeTask(
        texts=case["texts"],
        is_query=case["is_query"],
        instruction=case.get("instruction"),
        options=case.get("options", {}),
    )
    prepared = adapter.prepare(task)
    (vectors,) = adapter.forward([Part(prepared, 0, len(prepared.item_costs))])
    return vectors


def score(adapter: LlmRerankerAdapter, case: dict[str, Any]) -> list[float]:
    task = ScoreTask(query=case["query"], texts=case["texts"], instruction=case.get("instruction"))
    prepared = adapter.prepare(task)
    (scores,) = adapter.forward([Part(prepared, 0, len(prepared.item_costs))])
    return scores


@pytest.mark.parametrize("case", MISTRAL_EMBED_CASES, ids=lambda case: case["name"])
def test_the_mistral_embedder_equals_the_reference(embedder: DecoderEmbedderAdapter, case: dict[str, Any]) -> None:
    np.testing.assert_allclose(encode(embedder, case), recorded()["embed_mistral"][case["name"]], atol=TOL, rtol=0)


def test_the_mistral_cases_are_not_vacuous(mistral_folder: Path) -> None:
    answers = recorded()["embed_mistral"]
    queries = np.array(answers["queries-default-instruction"])
    assert not np.allclose(queries[0], queries[1], atol=1e-3)
    assert not np.allclose(queries, answers["queries-instruction"], atol=1e-3)
    # Without the appended end token the vectors differ: append_eos is what makes them equal.
    plain = DecoderEmbedderAdapter.load(load_context(mistral_folder, MAX_SEQ, normalize=True))
    vectors = encode(plain, MISTRAL_EMBED_CASES[0])
    assert not np.allclose(vectors[0], answers["documents"][0], atol=1e-3)


def test_append_eos_appends_the_end_token_to_every_text_that_is_not_blank(embedder: DecoderEmbedderAdapter) -> None:
    prepared = embedder.prepare(EncodeTask(texts=[TEXTS[0], "  "]))
    rows = prepared.payload.ids
    eos = embedder.tokenizer.ids(["</s>"], None)[0][-1]
    assert rows[0][-1] == eos and rows[1][-1] != eos


def test_append_eos_must_be_a_boolean(mistral_folder: Path) -> None:
    with pytest.raises(ValueError, match="append_eos"):
        DecoderEmbedderAdapter.load(load_context(mistral_folder, MAX_SEQ, append_eos="yes"))


@pytest.mark.parametrize("case", MXBAI_SCORE_CASES, ids=lambda case: case["name"])
def test_the_mxbai_reranker_equals_the_library(reranker: LlmRerankerAdapter, case: dict[str, Any]) -> None:
    np.testing.assert_allclose(score(reranker, case), recorded()["score_mxbai"][case["name"]], atol=TOL, rtol=0)


def test_the_mxbai_cases_are_not_vacuous(reranker: LlmRerankerAdapter) -> None:
    scores = recorded()["score_mxbai"]["default"]
    assert len(set(np.round(scores, 4))) == len(scores)
    assert any(s < 0.0 for s in scores)  # raw logit differences, not probabilities
    # The long document was cut to fit the entry's 512 tokens, as the reference cuts it.
    assert (
        max(
            reranker.prepare(
                ScoreTask(query=MXBAI_SCORE_CASES[0]["query"], texts=MXBAI_SCORE_CASES[0]["texts"])
            ).item_costs
        )
        == 512
    )


def test_an_unknown_input_format_or_score_mode_is_refused(tmp_path: Path) -> None:
    folder = build_tiny_qwen3_reranker(tmp_path / "qwen3")
    with pytest.raises(ValueError, match="input_format"):
        LlmRerankerAdapter.load(load_context(folder, 512, input_format="zerank"))
    with pytest.raises(ValueError, match="score_mode"):
        LlmRerankerAdapter.load(load_context(folder, 512, score_mode="softmax"))


def test_a_folder_whose_tokenizer_names_no_end_token_is_refused_under_append_eos(
    mistral_folder: Path, tmp_path: Path
) -> None:
    import shutil

    copy = Path(shutil.copytree(mistral_folder, tmp_path / "copy"))
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = copy / name
        if path.is_file():
            data = json.loads(path.read_text())
            data.pop("eos_token", None)
            path.write_text(json.dumps(data))
    with pytest.raises(UnservableModel, match="eos_token"):
        DecoderEmbedderAdapter.load(load_context(copy, MAX_SEQ, append_eos=True))


async def test_both_families_answer_the_reference_over_http_from_their_catalog_entries(
    mistral_folder: Path, tmp_path: Path
) -> None:
    """The catalog options (append_eos, input_format) reach the adapters through the app."""
    json_only = {"Accept": "application/json"}
    case = MISTRAL_EMBED_CASES[1]  # queries with the entry's default instruction
    body = encode_body(case)
    (tmp_path / "e").mkdir()
    (tmp_path / "r").mkdir()
    async with serving_one_entry(tmp_path / "e", MISTRAL_EMBEDDER, mistral_embedder_entry(str(mistral_folder))) as c:
        embedded = await c.post(f"/v1/encode/{MISTRAL_EMBEDDER}", headers=json_only, json=body)
    assert embedded.status_code == 200, embedded.text
    vectors = [item["dense"]["values"] for item in embedded.json()["items"]]
    np.testing.assert_allclose(vectors, recorded()["embed_mistral"][case["name"]], atol=TOL, rtol=0)

    rerank_folder = build_tiny_mxbai_reranker(tmp_path / "mxbai")
    score_case = MXBAI_SCORE_CASES[0]
    async with serving_one_entry(tmp_path / "r", MXBAI_RERANKER, mxbai_reranker_entry(str(rerank_folder))) as c:
        scored = await c.post(f"/v1/score/{MXBAI_RERANKER}", headers=json_only, json=score_body(score_case))
    assert scored.status_code == 200, scored.text
    got = {int(s["item_id"]): s["score"] for s in scored.json()["scores"]}
    want = recorded()["score_mxbai"][score_case["name"]]
    np.testing.assert_allclose([got[i] for i in range(len(want))], want, atol=TOL, rtol=0)


def _variant(folder: Path, tmp_path: Path, name: str, path: str, change: dict[str, Any]) -> Path:
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / name))
    target = copy / path
    target.write_text(json.dumps({**json.loads(target.read_text()), **change}))
    return copy


@pytest.mark.parametrize(
    ("name", "path", "change", "reason"),
    [
        # GritLM and stella pool the mean of their tokens.
        (
            "mean-pooling",
            "1_Pooling/config.json",
            {"pooling_mode_lasttoken": False, "pooling_mode_mean_tokens": True},
            "pooling mode is 'mean'",
        ),
        # gte-Qwen2, NV-Embed-v2 and llama-embed-nemotron map their architecture to repository code.
        ("repository-code", "config.json", {"auto_map": {"AutoModel": "modeling_qwen.Qwen2Model"}}, "repository code"),
        # gte-Qwen2's config asks for bidirectional attention (with its repository code): that reason first.
        (
            "bidirectional",
            "config.json",
            {"is_causal": False, "auto_map": {"AutoModel": "modeling_qwen.Qwen2Model"}},
            "is_causal false",
        ),
        # Without repository code transformers' own class would attend bidirectionally: refused all the same.
        ("bidirectional-stock", "config.json", {"is_causal": False}, "attends bidirectionally"),
    ],
)
def test_the_families_sift_cannot_serve_exactly_are_refused_at_load(
    mistral_folder: Path, tmp_path: Path, name: str, path: str, change: dict[str, Any], reason: str
) -> None:
    folder = _variant(mistral_folder, tmp_path, name, path, change)
    with pytest.raises(UnservableModel, match=reason):
        DecoderEmbedderAdapter.load(load_context(folder, MAX_SEQ, append_eos=True))
