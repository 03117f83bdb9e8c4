"""DecoderEmbedderAdapter on a tiny random Qwen3 embedder: equal within 1e-5 to
sentence-transformers' own encode (recorded once, tests/adapters/parity), every
request's vectors independent of what shares its forward, and clear errors."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask, Part
from sift_server.adapters.decoder_embedder import DecoderEmbedderAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.adapters.parity.decoder_cases import EMBED_CASES, MAX_SEQ, TEXTS
from tests.adapters.parity.decoder_compare import TOL, recorded
from tests.fixtures.tiny_decoder import (
    HIDDEN,
    MATRYOSHKA_MIN_DIM,
    QUERY_INSTRUCTION,
    QUERY_TEMPLATE,
    build_tiny_qwen3_embedder,
)
from tests.fixtures.tiny_embedder import build_tiny_embedder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_embedder(tmp_path_factory.mktemp("qwen3_embedder"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> DecoderEmbedderAdapter:
    return DecoderEmbedderAdapter.load(
        load_context(
            folder,
            MAX_SEQ,
            query_template=QUERY_TEMPLATE,
            default_instruction=QUERY_INSTRUCTION,
            matryoshka_min_dim=MATRYOSHKA_MIN_DIM,
        )
    )


def task_of(case: dict[str, Any]) -> EncodeTask:
    """The task service/encode builds from the case's request."""
    options = case.get("options", {})
    return EncodeTask(
        texts=case["texts"],
        is_query=case["is_query"],
        instruction=case.get("instruction") or options.get("instruction"),
        options=options,
    )


def run(adapter: DecoderEmbedderAdapter, *tasks: EncodeTask) -> list[list[np.ndarray]]:
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_equals_sentence_transformers(adapter: DecoderEmbedderAdapter, case: dict[str, Any]) -> None:
    expected = np.asarray(recorded()["embed"][case["name"]], dtype=np.float32)
    (vectors,) = run(adapter, task_of(case))
    got = np.stack(vectors)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)


def test_the_cases_are_not_vacuous() -> None:
    embed = recorded()["embed"]
    documents = np.asarray(embed["documents"])
    np.testing.assert_allclose(np.linalg.norm(documents, axis=1), 1.0, atol=1e-6)
    assert not np.allclose(np.linalg.norm(embed["documents-not-normalized"], axis=1), 1.0)
    # The instruction changes the query vector, and the default instruction is not the empty one.
    assert not np.allclose(embed["queries-default-instruction"], embed["queries-instruction"], atol=1e-3)
    assert np.asarray(embed["queries-matryoshka-16"]).shape == (2, 16)


def test_a_request_does_not_depend_on_what_shares_its_forward(adapter: DecoderEmbedderAdapter) -> None:
    queries, documents = task_of(EMBED_CASES[1]), task_of(EMBED_CASES[5])
    together = run(adapter, queries, documents)
    assert len(together[0]) == 2 and len(together[1]) == len(TEXTS)
    for fused, alone in zip(together, (run(adapter, queries)[0], run(adapter, documents)[0]), strict=True):
        np.testing.assert_allclose(np.stack(fused), np.stack(alone), atol=TOL, rtol=0)
    assert together[1][0].shape == (HIDDEN,)


def test_costs_are_real_token_counts_and_long_texts_are_cut(adapter: DecoderEmbedderAdapter) -> None:
    prepared = adapter.prepare(EncodeTask(texts=TEXTS))
    assert max(prepared.item_costs) == MAX_SEQ
    assert prepared.item_costs[2] == 2  # "x" and the end token the tokenizer appends
    with pytest.raises(InputTooLong):
        adapter.prepare(EncodeTask(texts=TEXTS, overflow="error"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dimensions": 4}, "dimensions"),
        ({"dimensions": 40}, "dimensions"),
        ({"dimensions": True}, "dimensions"),
        ({"normalize": "yes"}, "normalize"),
        ({"query_template": "{text} {lang}"}, "lang"),
        ({"default_instruction": 3}, "default_instruction"),
    ],
)
def test_bad_options_are_clear_400s(adapter: DecoderEmbedderAdapter, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        adapter.prepare(EncodeTask(texts=["a"], is_query=True, options=options))


def test_the_full_width_is_always_allowed(adapter: DecoderEmbedderAdapter) -> None:
    (vectors,) = run(adapter, EncodeTask(texts=["a"], options={"dimensions": HIDDEN}))
    assert vectors[0].shape == (HIDDEN,)
    assert adapter.info.dims == {"dense": HIDDEN} and adapter.info.outputs == ("dense",)


def test_without_an_entry_template_the_folders_prompts_apply(folder: Path) -> None:
    bare = DecoderEmbedderAdapter.load(load_context(folder, MAX_SEQ))
    case = EMBED_CASES[1]  # the folder's query prompt is the default instruction's
    (vectors,) = run(bare, task_of(case))
    np.testing.assert_allclose(np.stack(vectors), recorded()["embed"][case["name"]], atol=TOL, rtol=0)


def test_an_encoder_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnservableModel, match=r"pooling mode is 'mean'.*sentence-embedder"):
        DecoderEmbedderAdapter.load(load_context(build_tiny_embedder(tmp_path / "bert")))


def test_an_unknown_module_is_refused(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    modules = (copy / "modules.json").read_text().replace("models.Normalize", "models.Dense")
    (copy / "modules.json").write_text(modules)
    with pytest.raises(UnservableModel, match="Dense"):
        DecoderEmbedderAdapter.load(load_context(copy, MAX_SEQ))


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_the_runtimes_answer_the_reference_too(folder: Path, tmp_path: Path, backend: str) -> None:
    """The exported decoder (left-padded, causal) on ONNX Runtime and OpenVINO fp32, as ``auto`` may pick it."""
    ctx = load_context(
        folder,
        MAX_SEQ,
        query_template=QUERY_TEMPLATE,
        default_instruction=QUERY_INSTRUCTION,
        matryoshka_min_dim=MATRYOSHKA_MIN_DIM,
    )
    adapter = DecoderEmbedderAdapter.load(replace(ctx, backend=backend, precision="fp32", cache_dir=tmp_path))
    assert adapter.info.runtime["backend"] == backend
    for case in (EMBED_CASES[0], EMBED_CASES[2]):
        (vectors,) = run(adapter, task_of(case))
        np.testing.assert_allclose(np.stack(vectors), recorded()["embed"][case["name"]], atol=TOL, rtol=0)
