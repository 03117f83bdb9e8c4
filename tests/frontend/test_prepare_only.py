"""A front-end's prepare-side adapters (``LoadContext.prepare_only``) prepare exactly what
the full adapters do, and hold no network."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from sift_server.adapters.base import EncodeTask, ExtractTask, Part, ScoreTask, TaskInput
from sift_server.registry.catalog import Catalog
from sift_server.registry.loader import load_adapter
from tests.e2e.tiny_tasks import catalog_entry
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_gliclass

CASES: dict[str, tuple[str, str, TaskInput]] = {
    "tiny/embedder": (
        "sentence-embedder",
        "encode",
        EncodeTask(texts=["hello world", "a longer text " * 9], is_query=True),
    ),
    "tiny/reranker": ("cross-encoder", "score", ScoreTask(query="capital of France", texts=["Paris", "Berlin is big"])),
    "tiny/gliclass": ("gliclass", "extract", ExtractTask(texts=["The match ended 2-1."], labels=["sport", "politics"])),
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    root = tmp_path_factory.mktemp("prepare-only")
    builders = {
        "tiny/embedder": build_tiny_embedder,
        "tiny/reranker": build_tiny_cross_encoder,
        "tiny/gliclass": build_tiny_gliclass,
    }
    folder = root / "catalog"
    folder.mkdir()
    for index, (name, (adapter, task, _)) in enumerate(CASES.items()):
        built = builders[name](root / f"model-{index}")
        (folder / f"{index}.yaml").write_text(catalog_entry(name, adapter, Path(built), task))
    return Catalog.from_dirs([folder])


@pytest.mark.parametrize("name", list(CASES))
def test_prepare_only_prepares_as_the_full_adapter(catalog: Catalog, name: str) -> None:
    spec = catalog.specs[name]
    full = load_adapter(spec, 1, backend_override="torch:fp32")
    prepare_side = load_adapter(spec, 1, prepare_only=True)
    assert type(prepare_side).loads_prepare_only
    task = CASES[name][2]
    assert pickle.dumps(prepare_side.prepare(task)) == pickle.dumps(full.prepare(task))
    assert prepare_side.info.tasks == full.info.tasks and prepare_side.info.dims == full.info.dims
    assert prepare_side.info.runtime["prepare_only"] is True
    assert prepare_side.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="prepare requests only"):
        prepare_side.forward([Part(prepare_side.prepare(task), 0, 1)])
