"""BgeM3Adapter on a tiny random XLM-RoBERTa with the M3 heads: dense, sparse and
multivector equal within 1e-5 (sparse token ids exactly, in order) to FlagEmbedding's
``BGEM3FlagModel`` (recorded once, tests/adapters/parity), its scores in every
``score_mode`` too, every request's outputs independent of what shares its forward,
and clear errors."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask, Part, ScoreTask, TaskInput
from sift_server.adapters.bge_m3 import BgeM3Adapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.parity.m3_cases import EMBED_CASES, MAX_SEQ, SCORE_CASES, TEXTS
from tests.adapters.parity.m3_compare import TOL, assert_item_equals, recorded
from tests.fixtures.tiny_m3 import HIDDEN, build_tiny_m3, vocab_size


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_m3(tmp_path_factory.mktemp("m3"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> BgeM3Adapter:
    return BgeM3Adapter.load(load_context(folder, MAX_SEQ))


def encode_task(case: dict[str, Any]) -> EncodeTask:
    """The task service/encode builds from the case's request."""
    return EncodeTask(
        texts=case["texts"],
        is_query=case["is_query"],
        instruction=case.get("instruction"),
        options=case.get("options", {}),
    )


def score_task(case: dict[str, Any]) -> ScoreTask:
    return ScoreTask(
        query=case["query"], texts=case["texts"], instruction=case.get("instruction"), options=case.get("options", {})
    )


def run(adapter: BgeM3Adapter, *tasks: TaskInput) -> list[list[Any]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_flagembedding(adapter: BgeM3Adapter, case: dict[str, Any]) -> None:
    expected = recorded()["embed"][case["name"]]
    (items,) = run(adapter, encode_task(case))
    assert len(items) == len(case["texts"])
    for index, item in enumerate(items):
        assert_item_equals(
            {
                "dense": item["dense"],
                "sparse": (item["sparse"].indices, item["sparse"].values),
                "multivector": item["multivector"],
            },
            expected,
            index,
        )


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_flagembedding(adapter: BgeM3Adapter, case: dict[str, Any]) -> None:
    (scores,) = run(adapter, score_task(case))
    np.testing.assert_allclose(scores, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_the_cases_are_not_vacuous() -> None:
    embed = recorded()["embed"]
    documents = embed["documents"]
    np.testing.assert_allclose(np.linalg.norm(documents["dense"], axis=1), 1.0, atol=1e-6)
    assert not np.allclose(np.linalg.norm(embed["not-normalized"]["dense"], axis=1), 1.0)
    # One vector per token after <s> (</s> included); the long text cut to MAX_SEQ tokens.
    assert [len(m) for m in documents["multivector"]][2:] == [2, MAX_SEQ - 1]
    # The repeated "the" and "capital" keep one weight each, and <unk> (id 3) is dropped.
    second = documents["sparse"][1]["indices"]
    assert len(second) == len(set(second)) and 3 not in second
    scores = recorded()["score"]
    assert len({tuple(np.round(scores[m], 4)) for m in ("dense", "sparse", "colbert", "hybrid")}) == 4
    assert scores["default"] == scores["dense"]


def test_a_request_does_not_depend_on_what_shares_its_forward(adapter: BgeM3Adapter) -> None:
    documents, raw = encode_task(EMBED_CASES[0]), encode_task(EMBED_CASES[3])
    together = run(adapter, documents, raw)
    for fused, alone in zip(together, (run(adapter, documents)[0], run(adapter, raw)[0]), strict=True):
        for a, b in zip(fused, alone, strict=True):
            np.testing.assert_allclose(a["dense"], b["dense"], atol=TOL, rtol=0)
            np.testing.assert_allclose(a["multivector"], b["multivector"], atol=TOL, rtol=0)
            np.testing.assert_array_equal(a["sparse"].indices, b["sparse"].indices)
    # Two score requests with different modes in one forward keep their own modes.
    sparse, colbert = score_task(SCORE_CASES[2]), score_task(SCORE_CASES[3])
    both = run(adapter, sparse, colbert)
    np.testing.assert_allclose(both[0], recorded()["score"]["sparse"], atol=TOL, rtol=0)
    np.testing.assert_allclose(both[1], recorded()["score"]["colbert"], atol=TOL, rtol=0)


def test_only_the_outputs_asked_for_are_computed(adapter: BgeM3Adapter) -> None:
    case = EMBED_CASES[0]
    sparse_only = replace(encode_task(case), output_types=("sparse",))
    dense_only = replace(encode_task(case), output_types=("dense",))
    every = run(adapter, encode_task(case))[0]
    both = run(adapter, sparse_only, dense_only)
    assert all(set(item) == {"sparse"} for item in both[0])
    assert all(set(item) == {"dense"} for item in both[1])
    for alone, full in zip(both[0], every, strict=True):
        np.testing.assert_array_equal(alone["sparse"].indices, full["sparse"].indices)
    for alone, full in zip(both[1], every, strict=True):
        np.testing.assert_allclose(alone["dense"], full["dense"], atol=TOL, rtol=0)


def test_a_score_split_across_forwards_answers_the_same(adapter: BgeM3Adapter) -> None:
    case = SCORE_CASES[4]
    prepared = adapter.prepare(score_task(case))
    first = adapter.forward([Part(prepared, 0, 2)])[0]
    second = adapter.forward([Part(prepared, 2, len(case["texts"]))])[0]
    np.testing.assert_allclose(first + second, recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_costs_are_real_token_counts_and_long_texts_are_cut(adapter: BgeM3Adapter) -> None:
    prepared = adapter.prepare(EncodeTask(texts=TEXTS))
    assert max(prepared.item_costs) == MAX_SEQ
    assert prepared.item_costs[2] == 3  # <s> x </s>
    with pytest.raises(InputTooLong):
        adapter.prepare(EncodeTask(texts=TEXTS, overflow="error"))
    with pytest.raises(InputTooLong):
        adapter.prepare(ScoreTask(query="q", texts=TEXTS, overflow="error"))


def test_the_model_describes_itself(adapter: BgeM3Adapter) -> None:
    assert adapter.info.outputs == ("dense", "sparse", "multivector")
    assert adapter.info.dims == {"dense": HIDDEN, "sparse": vocab_size(), "multivector": HIDDEN}
    assert adapter.info.max_sequence_length == MAX_SEQ
    assert adapter.info.tasks == {"encode", "score"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"score_mode": "maxsim"}, "score_mode"),
        ({"score_mode": ["dense"]}, "score_mode"),
        ({"score_mode": "hybrid", "score_weights": {"lexical": 1}}, "lexical"),
        ({"score_mode": "hybrid", "score_weights": {"dense": -1}}, "non-negative"),
        ({"score_mode": "hybrid", "score_weights": {"dense": True}}, "non-negative"),
        ({"score_mode": "hybrid", "score_weights": [1, 2]}, "score_weights"),
        ({"score_mode": "hybrid", "score_weights": {"dense": 0, "sparse": 0, "colbert": 0}}, "positive"),
    ],
)
def test_bad_score_options_are_clear_400s(adapter: BgeM3Adapter, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        adapter.prepare(ScoreTask(query="q", texts=["a"], options=options))


def test_bad_encode_options_are_clear_400s(adapter: BgeM3Adapter) -> None:
    with pytest.raises(InvalidInput, match="normalize"):
        adapter.prepare(EncodeTask(texts=["a"], options={"normalize": "no"}))
    with pytest.raises(InvalidInput, match="at least one"):
        adapter.prepare(ScoreTask(query="q", texts=[]))


@pytest.mark.parametrize("missing", ["colbert_linear.pt", "sparse_linear.pt"])
def test_a_folder_without_the_m3_heads_is_refused(folder: Path, tmp_path: Path, missing: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / missing).unlink()
    with pytest.raises(UnservableModel, match=missing):
        BgeM3Adapter.load(load_context(copy, MAX_SEQ))


def test_another_encoder_is_refused(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    config = (copy / "config.json").read_text().replace('"xlm-roberta"', '"bert"')
    (copy / "config.json").write_text(config)
    with pytest.raises(UnservableModel, match="XLM-RoBERTa"):
        BgeM3Adapter.load(load_context(copy, MAX_SEQ))


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_the_runtimes_answer_the_reference_too(folder: Path, tmp_path: Path, backend: str) -> None:
    """The exported encoder on ONNX Runtime and OpenVINO fp32, as ``auto`` may pick it."""
    ctx = replace(load_context(folder, MAX_SEQ), backend=backend, precision="fp32", cache_dir=tmp_path)
    adapter = BgeM3Adapter.load(ctx)
    assert adapter.info.runtime["backend"] == backend
    case = EMBED_CASES[0]
    (items,) = run(adapter, encode_task(case))
    for index, item in enumerate(items):
        assert_item_equals(
            {
                "dense": item["dense"],
                "sparse": (item["sparse"].indices, item["sparse"].values),
                "multivector": item["multivector"],
            },
            recorded()["embed"][case["name"]],
            index,
        )
    (scores,) = run(adapter, score_task(SCORE_CASES[4]))
    np.testing.assert_allclose(scores, recorded()["score"]["hybrid"], atol=TOL, rtol=0)


def test_auto_keeps_a_backend_only_when_all_three_outputs_agree() -> None:
    from sift_server.adapters.bge_m3 import M3_AGREEMENT
    from sift_server.adapters.sparse_encoder import SparseVector

    def item(dense: list[float], ids: list[int], weights: list[float]) -> dict[str, Any]:
        sparse = SparseVector(np.asarray(ids, dtype=np.int32), np.asarray(weights, dtype=np.float32))
        return {"dense": np.asarray(dense), "multivector": np.asarray([dense, dense[::-1]]), "sparse": sparse}

    agree = M3_AGREEMENT.rule(M3_AGREEMENT.default)
    reference = [item([1.0, 0.0], [5, 7], [1.0, 0.5])]
    assert agree([item([1.0, 1e-5], [5, 7], [1.0, 0.50001])], reference)[0]
    assert not agree([item([1.0, 0.1], [5, 7], [1.0, 0.5])], reference)[0]  # dense and multivector drift
    assert not agree([item([1.0, 0.0], [7, 5], [0.5, 1.0])], reference)[0]  # the ids' order changed
    assert not agree([item([1.0, 0.0], [5], [1.0])], reference)[0]  # a weight crossed zero
    assert not agree([item([1.0, 0.0], [5, 7], [1.0, 0.4])], reference)[0]  # a weight drifted
