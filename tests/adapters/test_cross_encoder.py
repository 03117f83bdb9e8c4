"""CrossEncoderAdapter: parity with sentence-transformers and plain transformers,
batching isolation, costs and length handling, on a tiny random BERT reranker."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from sift_server.adapters.base import ExtractTask, Part, Prepared, ScoreTask, TaskInput
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context
from tests.fixtures.tiny_models import build_tiny_cross_encoder

TOL = 1e-5
QUERY = "what is a vector database?"
DOCS = [
    "A vector database stores embeddings and finds nearest neighbours quickly.",
    "Bananas are yellow.",
    "Vector search engines index high-dimensional vectors for similarity queries, "
    "usually with approximate nearest neighbour structures such as HNSW graphs.",
    "",
]
LONG_DOC = " ".join(["relevance"] * 80) + " end"


def run(adapter: CrossEncoderAdapter, *tasks: ScoreTask) -> list[list[float]]:
    """prepare each task, then one forward with every request whole."""
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def assert_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert abs(a - e) <= TOL, (actual, expected)


def test_info(cross_encoder: CrossEncoderAdapter) -> None:
    assert cross_encoder.info.tasks == frozenset({"score"})
    assert cross_encoder.info.outputs == ("score",)
    assert cross_encoder.info.max_sequence_length == 512  # tokenizer and position table agree


@pytest.fixture(scope="module")
def reference(cross_encoder_dir: Path) -> Any:
    """sentence-transformers' own CrossEncoder over the same folder."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(cross_encoder_dir), device="cpu", local_files_only=True)


def test_raw_logits_match_sentence_transformers(cross_encoder: CrossEncoderAdapter, reference: Any) -> None:
    pairs = [(QUERY, doc) for doc in DOCS]
    expected = reference.predict(pairs, activation_fn=torch.nn.Identity(), show_progress_bar=False)
    [scores] = run(cross_encoder, ScoreTask(query=QUERY, texts=DOCS))
    assert all(type(s) is float for s in scores)
    assert_close(scores, [float(x) for x in expected])
    # The scores must discriminate, or the comparison above proves little.
    assert max(scores) - min(scores) > 1e-3


def test_sigmoid_option_matches_sentence_transformers_default(cross_encoder_dir: Path, reference: Any) -> None:
    assert isinstance(reference.activation_fn, torch.nn.Sigmoid)  # its default for num_labels=1
    expected = reference.predict([(QUERY, doc) for doc in DOCS], show_progress_bar=False)
    adapter = CrossEncoderAdapter.load(load_context(cross_encoder_dir, activation="sigmoid"))
    [scores] = run(adapter, ScoreTask(query=QUERY, texts=DOCS))
    assert_close(scores, [float(x) for x in expected])


def plain_transformers_scores(folder: Path, query: str, docs: list[str]) -> list[float]:
    """One unpadded forward per pair: the reference free of any batching."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    out = []
    with torch.inference_mode():
        for doc in docs:
            # Lists, so an empty document still counts as the second sequence.
            logits = model(**tokenizer([query], [doc], return_tensors="pt")).logits
            out.append(float(logits[0, -1]))
    return out


def test_matches_plain_transformers(cross_encoder: CrossEncoderAdapter, cross_encoder_dir: Path) -> None:
    [scores] = run(cross_encoder, ScoreTask(query=QUERY, texts=DOCS))
    assert_close(scores, plain_transformers_scores(cross_encoder_dir, QUERY, DOCS))


def test_two_label_head_scores_with_last_class(tmp_path: Path) -> None:
    folder = build_tiny_cross_encoder(tmp_path / "two_labels", num_labels=2)
    adapter = CrossEncoderAdapter.load(load_context(folder))
    [scores] = run(adapter, ScoreTask(query=QUERY, texts=DOCS))
    assert_close(scores, plain_transformers_scores(folder, QUERY, DOCS))


def test_fused_forward_equals_separate_forwards(cross_encoder: CrossEncoderAdapter) -> None:
    tasks = [
        ScoreTask(query=QUERY, texts=DOCS),
        ScoreTask(query="bananas", texts=["Bananas are yellow.", LONG_DOC]),
        ScoreTask(query="a much longer query about approximate nearest neighbour search", texts=DOCS[:1]),
    ]
    fused = run(cross_encoder, *tasks)
    assert [len(x) for x in fused] == [len(t.texts) for t in tasks]
    for task, together in zip(tasks, fused, strict=True):
        [alone] = run(cross_encoder, task)
        assert_close(together, alone)


def test_split_request_parts_score_their_own_items(cross_encoder: CrossEncoderAdapter) -> None:
    prepared = cross_encoder.prepare(ScoreTask(query=QUERY, texts=DOCS))
    [whole] = cross_encoder.forward([Part(prepared, 0, 4)])
    head, tail = cross_encoder.forward([Part(prepared, 0, 1), Part(prepared, 1, 4)])
    assert_close(head + tail, whole)


def test_costs_are_pair_token_counts(cross_encoder: CrossEncoderAdapter) -> None:
    prepared = cross_encoder.prepare(ScoreTask(query=QUERY, texts=DOCS))
    tokenizer = cross_encoder.tokenizer
    expected = [len(tokenizer([QUERY], [doc])["input_ids"][0]) for doc in DOCS]
    assert prepared.item_costs == expected
    assert all(type(c) is int and c > 0 for c in prepared.item_costs)
    assert prepared.input_tokens == sum(expected)


def test_all_score_requests_share_a_compat_key(cross_encoder: CrossEncoderAdapter) -> None:
    a = cross_encoder.prepare(ScoreTask(query="a", texts=["x"]))
    b = cross_encoder.prepare(ScoreTask(query="b", texts=["y", "z"], instruction="ignored"))
    assert a.compat_key == b.compat_key
    hash(a.compat_key)


@pytest.fixture(scope="module")
def short_cross_encoder(cross_encoder_dir: Path) -> CrossEncoderAdapter:
    return CrossEncoderAdapter.load(load_context(cross_encoder_dir, max_sequence_length=24))


def test_overflow_error_raises_input_too_long(short_cross_encoder: CrossEncoderAdapter) -> None:
    with pytest.raises(InputTooLong):
        short_cross_encoder.prepare(ScoreTask(query=QUERY, texts=["short", LONG_DOC], overflow="error"))
    ok = short_cross_encoder.prepare(ScoreTask(query=QUERY, texts=["short"], overflow="error"))
    assert ok.item_costs[0] <= 24


def test_truncation_cuts_the_document_and_keeps_the_query(short_cross_encoder: CrossEncoderAdapter) -> None:
    prepared = short_cross_encoder.prepare(ScoreTask(query=QUERY, texts=[LONG_DOC]))
    assert prepared.item_costs == [24]
    ids = prepared.payload[0]["input_ids"]
    query_ids = short_cross_encoder.tokenizer(QUERY)["input_ids"]  # [CLS] query [SEP]
    assert ids[: len(query_ids)] == query_ids
    [[score]] = short_cross_encoder.forward([Part(prepared, 0, 1)])
    assert math.isfinite(score)


def test_query_longer_than_the_limit_still_truncates(short_cross_encoder: CrossEncoderAdapter) -> None:
    prepared = short_cross_encoder.prepare(ScoreTask(query=LONG_DOC, texts=["doc", LONG_DOC]))
    assert all(c <= 24 for c in prepared.item_costs)
    scores = short_cross_encoder.forward([Part(prepared, 0, 2)])[0]
    assert all(math.isfinite(s) for s in scores)


@pytest.mark.parametrize(
    "task",
    [
        ScoreTask(query=QUERY, texts=[]),
        ExtractTask(texts=["x"], labels=["y"]),  # not a task this adapter serves
    ],
)
def test_invalid_requests(cross_encoder: CrossEncoderAdapter, task: TaskInput) -> None:
    with pytest.raises(InvalidInput):
        cross_encoder.prepare(task)


def test_memory_and_prepared_shape(cross_encoder: CrossEncoderAdapter) -> None:
    assert cross_encoder.memory_bytes() > 0
    prepared = cross_encoder.prepare(ScoreTask(query=QUERY, texts=DOCS[:2]))
    assert isinstance(prepared, Prepared)
    assert len(prepared.payload) == len(prepared.item_costs) == 2
