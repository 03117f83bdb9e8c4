"""A weights-optional model (docling): its folder may be empty or absent, and a hub source
is taken from the local cache only, never downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_server.registry.catalog import Catalog, CatalogError, ModelSpec, resolve_local_path
from sift_server.registry.loader import weights_folder


def _spec(adapter: str, source: dict[str, str]) -> ModelSpec:
    return ModelSpec(name="docs", adapter=adapter, source=source, tasks=["extract"], file=Path("/cat/docs.yaml"))


def test_an_absent_or_empty_folder_is_the_models_folder(tmp_path: Path) -> None:
    assert resolve_local_path(_spec("docling", {"path": str(tmp_path / "absent")})) == tmp_path / "absent"
    assert resolve_local_path(_spec("docling", {"path": str(tmp_path)})) == tmp_path
    with pytest.raises(CatalogError, match="no weights"):
        resolve_local_path(_spec("gliner", {"path": str(tmp_path)}))


def test_a_hub_source_outside_the_cache_is_not_downloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    # Online as far as huggingface_hub knows: a download would be tried if we asked for one.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    folder = weights_folder(_spec("docling", {"hf": "someone/docling-artifacts", "revision": "0" * 40}))
    assert folder == tmp_path / "models--someone--docling-artifacts"
    assert not folder.exists()


def test_the_shipped_docling_entry() -> None:
    spec = Catalog.from_dirs([]).get("docling")
    assert (spec.adapter, spec.tasks, spec.batching.max_batch_cost) == ("docling", ["extract"], 1)
    assert spec.source.hf == "superlinked/docling-artifacts" and spec.source.revision
