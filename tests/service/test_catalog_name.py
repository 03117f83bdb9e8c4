"""A path's model id to the catalog's name: generation ids travel as ``Org__Name``
(sie-sdk's path ids); ``sift serve`` and the gateway read them with the same rule."""

from __future__ import annotations

from sift_server.service.common import catalog_name

CATALOG = {"Qwen/Qwen3-0.6B", "odd__name", "BAAI/bge-m3"}


def test_a_path_id_names_the_slashed_entry() -> None:
    assert catalog_name(CATALOG, "Qwen__Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_a_catalog_name_is_itself() -> None:
    assert catalog_name(CATALOG, "Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert catalog_name(CATALOG, "odd__name") == "odd__name"  # an entry named with __ wins


def test_an_unknown_name_is_left_for_the_registry_to_refuse() -> None:
    assert catalog_name(CATALOG, "nobody__here") == "nobody__here"
    assert catalog_name(CATALOG, "missing") == "missing"
