"""score and extract end to end on tiny locally built models (served by the e2e group's
``server``, tests/e2e/tiny_tasks.py), checked against the reference libraries' own outputs,
in msgpack and JSON, with fusion and bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from sift_sdk import AsyncSiftClient, SiftClient
from tests.e2e.tiny_tasks import CLASSIFY, NER, RERANK, TaskModels
from tests.fixtures.server_process import ServerProcess

MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
TEXTS = [
    "Ada Lovelace worked with Charles Babbage in London.",
    "Marie Curie was born in Warsaw and worked in Paris.",
    "The quarterly report shows revenue growth in Europe.",
]


@pytest.fixture
def models(task_models: TaskModels) -> dict[str, Path]:
    return task_models.folders


def trace_records(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's forward records so far (the server is shared: tests compare counts from a mark)."""
    return [json.loads(line) for line in server.trace_path.read_text().splitlines()]  # type: ignore[attr-defined]


def test_score_matches_the_cross_encoder_library_in_both_formats(
    server: ServerProcess, models: dict[str, Path]
) -> None:
    from sentence_transformers import CrossEncoder
    from torch import nn

    query = {"id": "q1", "text": "who worked with Babbage?"}
    items = [{"id": "d0", "text": TEXTS[0]}, {"text": TEXTS[1]}, {"id": "d2", "text": TEXTS[2]}]
    reference = CrossEncoder(str(models[RERANK]), device="cpu").predict(
        [(query["text"], item["text"]) for item in items], activation_fn=nn.Identity()
    )
    expected = {("d0", "item-1", "d2")[i]: float(score) for i, score in enumerate(reference)}

    packed = httpx.post(
        server.url + f"/v1/score/{RERANK}",
        content=msgpack.packb({"query": query, "items": items}),
        headers=MSGPACK,
    )
    assert packed.status_code == 200, packed.text
    body = msgpack.unpackb(packed.content, raw=False)
    as_json = httpx.post(
        server.url + f"/v1/score/{RERANK}",
        json={"query": query, "items": items},
        headers={"Accept": "application/json"},
    ).json()
    for result in (body, as_json):
        assert result["model"] == RERANK and result["query_id"] == "q1"
        assert [e["rank"] for e in result["scores"]] == [0, 1, 2]
        scores = [e["score"] for e in result["scores"]]
        assert scores == sorted(scores, reverse=True)
        for entry in result["scores"]:
            assert entry["score"] == pytest.approx(expected[entry["item_id"]], abs=1e-5)
    assert packed.headers["X-SIE-Server-Version"].startswith("0.10.")


def test_extract_entities_match_gliner_library(server: ServerProcess, models: dict[str, Path]) -> None:
    from gliner import GLiNER

    labels = ["person", "location"]
    reference = GLiNER.from_pretrained(str(models[NER]), local_files_only=True)
    items = [{"id": "x", "text": TEXTS[0]}, {"text": TEXTS[1]}]
    response = httpx.post(
        server.url + f"/v1/extract/{NER}",
        content=msgpack.packb({"items": items, "params": {"labels": labels, "options": {"threshold": 0.3}}}),
        headers=MSGPACK,
    )
    assert response.status_code == 200, response.text
    results = msgpack.unpackb(response.content, raw=False)["items"]
    assert [r["id"] for r in results] == ["x", "item-1"]
    found_any = False
    for item, result in zip(items, results, strict=True):
        expected = reference.predict_entities(item["text"], labels, threshold=0.3)
        got = result["entities"]
        assert [(e["start"], e["end"], e["label"]) for e in got] == [
            (e["start"], e["end"], e["label"]) for e in expected
        ]
        for entity, want in zip(got, expected, strict=True):
            assert entity["score"] == pytest.approx(want["score"], abs=1e-5)
            assert entity["text"] == item["text"][entity["start"] : entity["end"]]
            assert set(entity) == {"text", "label", "score", "start", "end", "bbox"}
        assert result["relations"] == [] and result["classifications"] == [] and result["objects"] == []
        found_any = found_any or bool(got)
    assert found_any, "the tiny GLiNER must produce entities at this threshold for the check to mean anything"


def test_extract_classifications_from_gliclass(server: ServerProcess) -> None:
    labels = ["science", "business", "history"]
    with SiftClient(server.url) as client:
        results = client.extract(CLASSIFY, [TEXTS[1], TEXTS[2]], labels=labels)
    for result in results:
        # Single-label in the catalog entry: a softmax over every label, best first.
        assert sorted(c.label for c in result.classifications) == sorted(labels)
        assert abs(sum(c.score for c in result.classifications) - 1.0) < 1e-5
        assert result.entities == []
    multi = httpx.post(
        server.url + f"/v1/extract/{CLASSIFY}",
        json={
            "items": [{"text": TEXTS[2]}],
            "params": {"labels": labels, "options": {"multi_label": True, "threshold": 0.0}},
        },
        headers={"Accept": "application/json"},
    ).json()["items"][0]["classifications"]
    assert [c["label"] for c in multi] and sorted(c["label"] for c in multi) == sorted(labels)
    assert [c["score"] for c in multi] == sorted((c["score"] for c in multi), reverse=True)


def test_extract_label_groups_over_the_wire(server: ServerProcess) -> None:
    body = {
        "items": [{"text": TEXTS[2]}, {"id": "b", "text": TEXTS[0]}],
        "params": {
            "instruction": "Classify the sentence:",
            "options": {
                "label_groups": {"topic": ["science", "business"], "tone": ["formal", "casual", "neutral"]},
                "classification_type": "multi-label",
                "threshold": 0.2,
                "examples": [{"text": "Profits rose.", "labels": ["topic.business"]}],
            },
        },
    }
    response = httpx.post(server.url + f"/v1/extract/{CLASSIFY}", content=msgpack.packb(body), headers=MSGPACK)
    assert response.status_code == 200, response.text
    payload = msgpack.unpackb(response.content)
    assert [item["id"] for item in payload["items"]] == ["item-0", "b"]
    for item in payload["items"]:
        labels = [c["label"] for c in item["classifications"]]
        assert all(label.split(".")[0] in ("topic", "tone") for label in labels)
        assert all(c["score"] >= 0.2 for c in item["classifications"])
        assert set(item["data"]) == {"topic", "tone"}
        assert set(item["data"]["tone"]["probabilities"]) == {"formal", "casual", "neutral"}
    # Usage counts the documents plus instruction and examples, not the label prompts.
    plain = dict(body, params={"labels": ["science"]})
    usage = msgpack.unpackb(
        httpx.post(server.url + f"/v1/extract/{CLASSIFY}", content=msgpack.packb(plain), headers=MSGPACK).content
    )["usage"]["input_tokens"]
    assert 0 < usage < payload["usage"]["input_tokens"]


async def test_concurrent_extracts_fuse_by_label_set_and_never_mix(server: ServerProcess) -> None:
    labels_a, labels_b = ["person"], ["location", "organization"]
    before = len(trace_records(server))
    async with AsyncSiftClient(server.url) as client:
        alone_a = await client.extract(NER, TEXTS[0], labels=labels_a, options={"threshold": 0.3})
        alone_b = await client.extract(NER, TEXTS[0], labels=labels_b, options={"threshold": 0.3})
        mixed = await asyncio.gather(
            *(
                client.extract(NER, TEXTS[0], labels=labels_a if i % 2 == 0 else labels_b, options={"threshold": 0.3})
                for i in range(16)
            )
        )
    for i, result in enumerate(mixed):
        expected = alone_a if i % 2 == 0 else alone_b
        assert [(e.start, e.end, e.label) for e in result.entities] == [
            (e.start, e.end, e.label) for e in expected.entities
        ]
        assert all(e.label in (labels_a if i % 2 == 0 else labels_b) for e in result.entities)
    ner_forwards = [r for r in trace_records(server)[before:] if r["model"] == NER]
    # 18 requests in far fewer forwards, and no forward mixed the two label sets (checked by results above).
    assert len(ner_forwards) < 18


async def test_concurrent_scores_share_forwards(server: ServerProcess) -> None:
    before = len(trace_records(server))
    async with AsyncSiftClient(server.url) as client:
        results = await asyncio.gather(*(client.score(RERANK, f"query {i}", [TEXTS[0], TEXTS[1]]) for i in range(12)))
    assert all(len(r.scores) == 2 for r in results)
    # 12 requests in fewer forwards.
    assert len([r for r in trace_records(server)[before:] if r["model"] == RERANK]) < 12


BAD: list[tuple[str, str, object, str]] = [
    ("score without query", f"/v1/score/{RERANK}", {"items": [{"text": "d"}]}, "INVALID_INPUT"),
    ("score without items", f"/v1/score/{RERANK}", {"query": {"text": "q"}}, "INVALID_INPUT"),
    ("score with empty items", f"/v1/score/{RERANK}", {"query": {"text": "q"}, "items": []}, "INVALID_INPUT"),
    (
        "score over 1000 items",
        f"/v1/score/{RERANK}",
        {"query": {"text": "q"}, "items": [{"text": "d"}] * 1001},
        "INVALID_INPUT",
    ),
    ("extract without labels", f"/v1/extract/{NER}", {"items": [{"text": "x"}]}, "INVALID_INPUT"),
    (
        "extract over 1000 labels",
        f"/v1/extract/{NER}",
        {"items": [{"text": "x"}], "params": {"labels": [f"l{i}" for i in range(1001)]}},
        "INVALID_INPUT",
    ),
    (
        "non-string labels",
        f"/v1/extract/{NER}",
        {"items": [{"text": "x"}], "params": {"labels": [1, 2]}},
        "INVALID_INPUT",
    ),
    (
        "threshold above 1",
        f"/v1/extract/{NER}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"threshold": 1.5}}},
        "INVALID_INPUT",
    ),
    (
        "threshold below 0",
        f"/v1/extract/{CLASSIFY}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"threshold": -0.1}}},
        "INVALID_INPUT",
    ),
    (
        "labels and label_groups",
        f"/v1/extract/{CLASSIFY}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"label_groups": {"g": ["b"]}}}},
        "INVALID_INPUT",
    ),
    (
        "unknown label in an example",
        f"/v1/extract/{CLASSIFY}",
        {
            "items": [{"text": "x"}],
            "params": {"labels": ["a"], "options": {"examples": [{"text": "t", "labels": ["z"]}]}},
        },
        "INVALID_INPUT",
    ),
    (
        "bad classification_type",
        f"/v1/extract/{CLASSIFY}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"classification_type": "some"}}},
        "INVALID_INPUT",
    ),
    (
        "label_groups on an entity model",
        f"/v1/extract/{NER}",
        {"items": [{"text": "x"}], "params": {"options": {"label_groups": {"g": ["b"]}}}},
        "INVALID_INPUT",
    ),
    (
        "flat_ner not a bool",
        f"/v1/extract/{NER}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"flat_ner": "no"}}},
        "INVALID_INPUT",
    ),
    (
        "extract on a reranker",
        f"/v1/extract/{RERANK}",
        {"items": [{"text": "x"}], "params": {"labels": ["a"]}},
        "INVALID_INPUT",
    ),
    ("score on an extractor", f"/v1/score/{NER}", {"query": {"text": "q"}, "items": [{"text": "d"}]}, "INVALID_INPUT"),
    ("encode on a reranker", f"/v1/encode/{RERANK}", {"items": [{"text": "x"}]}, "INVALID_INPUT"),
]


@pytest.mark.parametrize(("name", "path", "body", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_score_and_extract_input(server: ServerProcess, name: str, path: str, body: object, code: str) -> None:
    response = httpx.post(server.url + path, content=msgpack.packb(body), headers=MSGPACK)
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == code
    assert len(response.json()["detail"]["message"]) > 10
