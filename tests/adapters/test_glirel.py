"""GlirelAdapter: the glirel library's recorded answers (tests/fixtures/glirel_parity.json,
from ``GLiREL.predict_relations`` on a tiny random GLiREL) in process and over the
extract route, entities echoed, the words window, request errors, and loading
without ever resolving the backbone's hub id."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.base import ExtractTask, Part
from sift_server.adapters.glirel import MAX_ENTITIES, GlirelAdapter
from sift_server.errors import InputTooLong, InvalidInput
from tests.adapters.conftest import load_context, serving_one_entry
from tests.fixtures.tiny_glirel import BACKBONE_ID, FIXTURE, build_backbone_less, build_tiny_glirel
from tests.fixtures.tiny_models import TOKENIZER_FILES

TOL = 1e-5
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["cases"]


@pytest.fixture(scope="module")
def glirel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_glirel(tmp_path_factory.mktemp("glirel"))


@pytest.fixture(scope="module")
def bare_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GLiREL folder as the hub holds it: no backbone config or tokenizer."""
    return build_backbone_less(tmp_path_factory.mktemp("bare"))


@pytest.fixture(scope="module")
def glirel(glirel_dir: Path) -> GlirelAdapter:
    return GlirelAdapter.load(load_context(glirel_dir))


def task(case: dict[str, Any], **changes: Any) -> ExtractTask:
    options = {"top_k": case["top_k"]}
    base = ExtractTask(
        texts=[case["text"]],
        labels=tuple(case["labels"]),
        threshold=case["threshold"],
        options=options,
        metadata=[{"entities": case["entities"]}],
    )
    return replace(base, **changes)


def run(adapter: GlirelAdapter, *tasks: ExtractTask) -> list[list[dict[str, Any]]]:
    prepared = [adapter.prepare(t) for t in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def assert_same(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [(r["head"], r["tail"], r["relation"]) for r in got] == [
        (r["head"], r["tail"], r["relation"]) for r in expected
    ]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine["score"] == pytest.approx(theirs["score"], abs=TOL)


def test_the_fixture_is_not_vacuous() -> None:
    assert all(case["relations"] for case in CASES)
    assert len({(r["head"], r["tail"]) for case in CASES for r in case["relations"]}) > 10


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case['text'][:12]}-{case['threshold']}-{case['top_k']}")
def test_relations_equal_the_library(glirel: GlirelAdapter, case: dict[str, Any]) -> None:
    [[item]] = run(glirel, task(case))
    assert_same(item["relations"], case["relations"])
    assert item["entities"] == [{**e, "score": 1.0, "bbox": None} for e in case["entities"]]
    assert item["classifications"] == [] and item["data"] == {}


def test_fused_requests_equal_each_alone(glirel: GlirelAdapter) -> None:
    fused = run(glirel, *(task(case) for case in CASES))
    for [item], case in zip(fused, CASES, strict=True):
        assert_same(item["relations"], case["relations"])


def test_catalog_threshold_and_top_k_apply(glirel_dir: Path) -> None:
    case = CASES[1]  # threshold 0, top_k 1
    adapter = GlirelAdapter.load(load_context(glirel_dir, threshold=0.0, top_k=1))
    [[item]] = run(adapter, replace(task(case), threshold=None, options={}))
    assert_same(item["relations"], case["relations"])


def test_entities_past_the_words_read_take_no_part(glirel: GlirelAdapter) -> None:
    case = CASES[0]
    filler = " word" * glirel.max_words
    far = {"text": "Jobs", "label": "PER", "start": len(case["text"] + filler) + 1}
    far["end"] = far["start"] + 4
    long = replace(
        task(case),
        texts=[case["text"] + filler + " Jobs"],
        metadata=[{"entities": [*case["entities"], far]}],
    )
    [[item]] = run(glirel, long)
    assert "Jobs" not in {r["head"] for r in item["relations"]} | {r["tail"] for r in item["relations"]}
    assert len(item["entities"]) == len(case["entities"]) + 1
    with pytest.raises(InputTooLong):
        glirel.prepare(replace(long, overflow="error"))


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        (None, "metadata.entities"),
        ({"entities": []}, "metadata.entities"),
        ({"entities": "Apple"}, "must be a list"),
        ({"entities": [{"text": "x", "label": "ORG", "start": 0, "end": 10_000}]}, "start < end"),
        ({"entities": [{"text": "x", "label": "ORG", "start": 5, "end": 5}]}, "start < end"),
        ({"entities": [{"text": "x", "label": "ORG", "start": "0", "end": 5}]}, "integer"),
        ({"entities": [{"text": " ", "label": "ORG", "start": 5, "end": 6}]}, "covers no word"),
        ({"entities": [{"text": "x", "label": 3, "start": 0, "end": 5}]}, "strings"),
        ({"entities": [{"text": "A", "label": "X", "start": 0, "end": 1}] * (MAX_ENTITIES + 1)}, "at most 256"),
    ],
)
def test_bad_entities_are_400(glirel: GlirelAdapter, metadata: Any, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        glirel.prepare(replace(task(CASES[0]), metadata=[metadata]))


def test_request_errors(glirel: GlirelAdapter) -> None:
    with pytest.raises(InvalidInput, match="relation types"):
        glirel.prepare(replace(task(CASES[0]), labels=()))
    with pytest.raises(InvalidInput, match="128 characters"):
        glirel.prepare(replace(task(CASES[0]), labels=("x" * 129,)))
    with pytest.raises(InvalidInput, match="top_k"):
        glirel.prepare(replace(task(CASES[0]), options={"top_k": "all"}))
    with pytest.raises(InvalidInput, match="does not apply"):
        glirel.prepare(replace(task(CASES[0]), flat_ner=True))


def test_a_folder_without_its_backbone_is_refused(bare_dir: Path) -> None:
    with pytest.raises(ValueError, match=f"{BACKBONE_ID}.*never downloads"):
        GlirelAdapter.load(load_context(bare_dir))
    with pytest.raises(ValueError, match=r"lacks config\.json and tokenizer files"):
        GlirelAdapter.load(load_context(bare_dir, backbone="elsewhere"))


def test_options_backbone_names_a_local_folder(bare_dir: Path, tmp_path: Path) -> None:
    # Config and tokenizer only: the checkpoint sets every weight.
    backbone = tmp_path / "backbone"
    backbone.mkdir()
    for name in ("config.json", *TOKENIZER_FILES):
        shutil.copy2(bare_dir.parent / "work" / "backbone" / name, backbone / name)
    adapter = GlirelAdapter.load(load_context(bare_dir, backbone=str(backbone)))
    [[item]] = run(adapter, task(CASES[2]))
    assert_same(item["relations"], CASES[2]["relations"])
    relative = GlirelAdapter.load(load_context(bare_dir, backbone="../work/backbone"))
    [[item]] = run(relative, task(CASES[2]))
    assert_same(item["relations"], CASES[2]["relations"])


def test_a_checkpoint_that_leaves_weights_unset_is_refused(glirel_dir: Path, tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "partial"
    shutil.copytree(glirel_dir, folder)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    del state["scorer.proj_rel.weight" if "scorer.proj_rel.weight" in state else next(iter(state))]
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="does not set 1"):
        GlirelAdapter.load(load_context(folder))


async def test_extract_route_end_to_end(glirel_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: glirel\nsource: {{path: {glirel_dir}}}\ntasks: [extract]\n"
    url, json_only = "/v1/extract/tiny/glirel", {"Accept": "application/json"}
    case = CASES[3]
    body = {
        "items": [{"text": case["text"], "metadata": {"entities": case["entities"]}}],
        "params": {"labels": case["labels"], "options": {"threshold": case["threshold"], "top_k": case["top_k"]}},
    }
    async with serving_one_entry(tmp_path, "tiny/glirel", entry) as client:
        good = await client.post(url, headers=json_only, json=body)
        missing = await client.post(url, headers=json_only, json={**body, "items": [{"text": case["text"]}]})
    assert good.status_code == 200, good.text
    assert_same(good.json()["items"][0]["relations"], case["relations"])
    assert missing.status_code == 400 and missing.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
