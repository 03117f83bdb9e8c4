"""sift_bench.workload.heads: the catalog entries the bench serves its test heads from,
and the build-once cache (the builders themselves are swapped for cheap fakes:
the real ones load all-MiniLM-L6-v2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_bench.workload import heads
from sift_bench.workload.request import RequestSpec
from sift_server.adapters._extract_common import catalog_threshold
from sift_server.adapters.records import RECORDS
from sift_server.registry.catalog import load_spec, resolve_local_path


def fake_builder(calls: list[Path]) -> heads.Builder:
    def build(folder: Path) -> None:
        calls.append(folder)
        (folder / "gliner_config.json").write_text("{}", encoding="utf-8")
        (folder / "config.json").write_text("{}", encoding="utf-8")
        (folder / "model.safetensors").write_bytes(b"")
        (folder / "modules.json").write_text("[]", encoding="utf-8")
        (folder / "sparse_linear.pt").write_bytes(b"")

    return build


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    for head in heads.HEADS:
        monkeypatch.setitem(heads._HEADS, head, heads._HEADS[head]._replace(builder=fake_builder(calls)))
    return calls


@pytest.mark.parametrize("head", heads.HEADS)
def test_every_head_has_a_valid_catalog_entry(tmp_path: Path, built: list[Path], head: str) -> None:
    name, catalog, request = heads.build(head, tmp_path)
    [entry] = [p for p in catalog.glob("*.yaml") if load_spec(p).name == name]
    spec = load_spec(entry)
    assert spec.adapter == heads._HEADS[head].adapter
    assert resolve_local_path(spec) == tmp_path / heads._HEADS[head].folder
    # Every request of the head asks for a task of its model, and outputs its adapter has.
    assert request.primitive in spec.tasks
    record = RECORDS[spec.adapter]
    assert request.primitive in record.tasks
    if request.primitive == "encode":
        assert set(request.output_types) <= set(record.encode_outputs)
    if request.primitive == "extract":
        assert request.labels and len(set(request.labels)) == len(request.labels)


def test_each_retrieval_head_asks_what_a_user_of_its_family_sends(tmp_path: Path, built: list[Path]) -> None:
    assert heads.build("decoder", tmp_path)[2] == RequestSpec("encode")
    assert heads.build("llm-reranker", tmp_path)[2].primitive == "score"
    m3 = heads.build("bge-m3", tmp_path)[2]
    assert m3.output_types == ("dense", "sparse", "multivector")
    decoder = load_spec(tmp_path / "catalog" / "qwen3-embedding-minilm.yaml")
    assert decoder.options["query_template"] == "Instruct: {instruction}\nQuery:{text}"


def test_gliner_head_sends_entity_labels_under_the_librarys_threshold(tmp_path: Path, built: list[Path]) -> None:
    name, catalog, request = heads.build("gliner", tmp_path)
    spec = load_spec(catalog / "gliner-minilm.yaml")
    assert name == "bench/gliner-minilm"
    assert catalog_threshold(spec.options, None) == heads.GLINER_THRESHOLD == 0.5
    assert request.primitive == "extract"
    assert {"person", "location", "organization"} <= set(request.labels)


def test_a_head_is_built_once_and_reused(tmp_path: Path, built: list[Path]) -> None:
    heads.build("gliner", tmp_path)
    heads.build("gliner", tmp_path)
    heads.build("gliclass", tmp_path)
    assert len(built) == 2  # one build per head; the second gliner call reused the folder


def test_an_interrupted_build_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setitem(heads._HEADS, "gliner", heads._HEADS["gliner"]._replace(builder=crash))
    with pytest.raises(KeyboardInterrupt):
        heads.build("gliner", tmp_path)
    assert not (tmp_path / "gliner-minilm").exists()
    calls: list[Path] = []
    monkeypatch.setitem(heads._HEADS, "gliner", heads._HEADS["gliner"]._replace(builder=fake_builder(calls)))
    heads.build("gliner", tmp_path)
    assert len(calls) == 1 and (tmp_path / "gliner-minilm" / "gliner_config.json").is_file()


def test_unknown_head_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown test head"):
        heads.build("nope", tmp_path)
