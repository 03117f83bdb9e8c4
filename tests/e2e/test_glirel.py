"""GLiREL relations over HTTP from ``sift serve`` (the e2e group's ``server``), equal to the
glirel library's recorded answers (tests/fixtures/glirel_parity.json) in JSON and msgpack,
several items per request; and its 400s."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgpack
import pytest

from tests.e2e.tiny_tasks import RELATIONS
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_glirel import FIXTURE

CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["cases"]
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
URL = f"/v1/extract/{RELATIONS}"


def body(cases: list[dict[str, Any]]) -> dict[str, Any]:
    first = cases[0]
    return {
        "items": [{"text": c["text"], "metadata": {"entities": c["entities"]}} for c in cases],
        "params": {"labels": first["labels"], "options": {"threshold": first["threshold"], "top_k": first["top_k"]}},
    }


def assert_same(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [(r["head"], r["tail"], r["relation"]) for r in got] == [
        (r["head"], r["tail"], r["relation"]) for r in expected
    ]
    for mine, theirs in zip(got, expected, strict=True):
        assert set(mine) == {"head", "tail", "relation", "score"}
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-5)


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case['text'][:12]}-{case['threshold']}-{case['top_k']}")
def test_relations_equal_the_library_in_json(server: ServerProcess, case: dict[str, Any]) -> None:
    response = httpx.post(server.url + URL, json=body([case]), headers={"Accept": "application/json"}, timeout=60)
    assert response.status_code == 200, response.text
    [item] = response.json()["items"]
    assert_same(item["relations"], case["relations"])
    assert [(e["text"], e["label"], e["start"], e["end"]) for e in item["entities"]] == [
        (e["text"], e["label"], e["start"], e["end"]) for e in case["entities"]
    ]


def test_several_items_in_msgpack(server: ServerProcess) -> None:
    # Cases 0 and 1 share text and labels; case 0's settings are the catalog's (threshold 0.3, top_k 10).
    same = [CASES[0], {**CASES[0], "text": CASES[0]["text"]}]
    response = httpx.post(server.url + URL, content=msgpack.packb(body(same)), headers=MSGPACK, timeout=60)
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content, raw=False)["items"]
    assert [item["id"] for item in items] == ["item-0", "item-1"]
    for item in items:
        assert_same(item["relations"], CASES[0]["relations"])
    plain = {**body([CASES[0]]), "params": {"labels": CASES[0]["labels"]}}
    defaults = httpx.post(server.url + URL, json=plain, headers={"Accept": "application/json"}, timeout=60)
    assert defaults.status_code == 200, defaults.text
    assert_same(defaults.json()["items"][0]["relations"], CASES[0]["relations"])


ENTITY = {"text": "Apple", "label": "ORG", "start": 0, "end": 5}


@pytest.mark.parametrize(
    ("items", "params", "match"),
    [
        ([{"text": "Apple sells phones.", "metadata": {"entities": [ENTITY]}}], {}, "relation types"),
        ([{"text": "Apple sells phones."}], {"labels": ["makes"]}, "metadata.entities"),
        (
            [{"text": "Apple sells phones.", "metadata": {"entities": [{**ENTITY, "end": 99}]}}],
            {"labels": ["makes"]},
            "start < end",
        ),
        (
            [{"text": "Apple sells phones.", "metadata": {"entities": [ENTITY] * 257}}],
            {"labels": ["makes"]},
            "at most 256",
        ),
    ],
)
def test_bad_input_is_400(server: ServerProcess, items: list[Any], params: dict[str, Any], match: str) -> None:
    response = httpx.post(
        server.url + URL, json={"items": items, "params": params}, headers={"Accept": "application/json"}, timeout=60
    )
    assert response.status_code == 400, response.text
    assert response.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
    assert match in response.text
