"""Catalog errors fail at start and name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_server.registry.catalog import SHIPPED_CATALOG, Catalog, CatalogError, resolve_local_path


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def weights_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0")
    return folder


def entry(source: str, adapter: str = "sentence-embedder", extra: str = "") -> str:
    return f"name: my/model\nadapter: {adapter}\nsource:\n  {source}\ntasks: [encode]\n{extra}"


def test_shipped_catalog_loads_and_resolves_the_default_model_offline() -> None:
    catalog = Catalog.from_dirs([])
    spec = catalog.get("sentence-transformers/all-MiniLM-L6-v2")
    folder = resolve_local_path(spec)
    assert folder is not None and (folder / "model.safetensors").is_file()
    assert {p.stem for p in SHIPPED_CATALOG.glob("*.yaml")}
    assert "cross-encoder/ms-marco-MiniLM-L-6-v2" in catalog


def test_operator_catalog_adds_models(tmp_path: Path) -> None:
    folder = weights_folder(tmp_path)
    write(tmp_path / "cat", "mine.yaml", entry(f"path: {folder}"))
    catalog = Catalog.from_dirs([tmp_path / "cat"])
    assert "my/model" in catalog and "sentence-transformers/all-MiniLM-L6-v2" in catalog


def test_relative_path_is_relative_to_the_yaml_file(tmp_path: Path) -> None:
    weights_folder(tmp_path)
    write(tmp_path, "mine.yaml", entry("path: weights"))
    spec = Catalog.from_dirs([tmp_path], include_shipped=False).get("my/model")
    assert resolve_local_path(spec) == tmp_path / "weights"


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "name: [unclosed\n")
    with pytest.raises(CatalogError) as info:
        Catalog.from_dirs([tmp_path], include_shipped=False)
    assert str(path) in str(info.value) and "invalid YAML" in str(info.value)


def test_unknown_adapter_names_the_file_and_field(tmp_path: Path) -> None:
    folder = weights_folder(tmp_path)
    path = write(tmp_path / "cat", "bad.yaml", entry(f"path: {folder}", adapter="bert-magic"))
    with pytest.raises(CatalogError) as info:
        Catalog.from_dirs([tmp_path / "cat"], include_shipped=False)
    message = str(info.value)
    assert str(path) in message and "adapter" in message and "bert-magic" in message


def test_missing_weights_names_the_file_and_field(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    path = write(tmp_path / "cat", "noweights.yaml", entry(f"path: {empty}"))
    with pytest.raises(CatalogError) as info:
        Catalog.from_dirs([tmp_path / "cat"], include_shipped=False)
    assert str(path) in str(info.value) and "'source'" in str(info.value) and "no weights" in str(info.value)


def test_missing_folder_and_missing_package(tmp_path: Path) -> None:
    write(tmp_path / "a", "gone.yaml", entry(f"path: {tmp_path / 'nowhere'}"))
    with pytest.raises(CatalogError, match="does not exist"):
        Catalog.from_dirs([tmp_path / "a"], include_shipped=False)
    write(tmp_path / "b", "pkg.yaml", entry("package: no_such_package_for_sift"))
    with pytest.raises(CatalogError, match=r"source\.package"):
        Catalog.from_dirs([tmp_path / "b"], include_shipped=False)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: x\nadapter: sentence-embedder\nsource: {hf: a, path: b}\ntasks: [encode]\n", "source"),
        ("name: x\nadapter: sentence-embedder\nsource: {hf: a}\ntasks: [dance]\n", "tasks"),
        (
            "name: x\nadapter: sentence-embedder\nsource: {hf: a}\ntasks: [encode]\nbatching: {max_batch_cost: 0}\n",
            "batching.max_batch_cost",
        ),
        ("name: x\nadapter: sentence-embedder\nsource: {hf: a}\ntasks: [encode]\ncolour: blue\n", "colour"),
        ("adapter: sentence-embedder\nsource: {hf: a}\ntasks: [encode]\n", "name"),
    ],
)
def test_schema_errors_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, "e.yaml", text)
    with pytest.raises(CatalogError) as info:
        Catalog.from_dirs([tmp_path], include_shipped=False)
    assert str(path) in str(info.value) and f"field '{field}" in str(info.value)


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "name: x\nadapter: gliner\nsource: {hf: a}\ntasks: [extract]\n")
    write(tmp_path, "b.yaml", "name: x\nadapter: gliner\nsource: {hf: b}\ntasks: [extract]\n")
    with pytest.raises(CatalogError, match="already defined"):
        Catalog.from_dirs([tmp_path], include_shipped=False)


def test_sift_serve_fails_at_start_with_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sift_server.cli import main

    write(tmp_path, "bad.yaml", "name: x\nadapter: nope\nsource: {hf: a}\ntasks: [encode]\n")
    assert main(["serve", "--catalog", str(tmp_path), "--port", "0"]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_lora_sources_need_exactly_one_location(tmp_path: Path) -> None:
    from sift_server.registry.catalog import CatalogError, load_spec

    entry = tmp_path / "m.yaml"
    base = "name: m\nadapter: sentence-embedder\nsource: {hf: org/m}\ntasks: [encode]\n"
    entry.write_text(base + "loras:\n  a: {path: a, hf: org/a}\n")
    with pytest.raises(CatalogError, match="loras"):
        load_spec(entry)
    entry.write_text(base + "loras:\n  a: {hf: org/a}\nmax_loaded_loras: 0\n")
    with pytest.raises(CatalogError, match="max_loaded_loras"):
        load_spec(entry)
    entry.write_text(base + "loras:\n  a: {hf: org/a}\n  b: {path: b}\nmax_loaded_loras: 1\n")
    spec = load_spec(entry)
    assert sorted(spec.loras) == ["a", "b"] and spec.max_loaded_loras == 1


GLINER = "name: x\nadapter: gliner\nsource: {hf: a}\ntasks: [extract]\n"


@pytest.mark.parametrize(
    ("profiles", "field", "why"),
    [
        ("profiles: {default: {options: {threshold: 0.1}}}", "profiles", "'default' is reserved"),
        ("profiles: {'a:b': {options: {threshold: 0.1}}}", "profiles", "is not a profile name"),
        ("profiles: {'a/b': {options: {threshold: 0.1}}}", "profiles", "is not a profile name"),
        ("profiles: {'': {options: {threshold: 0.1}}}", "profiles", "is not a profile name"),
        ("profiles: {low: {options: {}}}", "profiles.low.options", "at least 1 item"),
        ("profiles: {low: {}}", "profiles.low.options", "required"),
        ("profiles: {low: {options: [threshold]}}", "profiles.low.options", "dictionary"),
        ("profiles: {low: {options: {profile: high}}}", "profiles.low", "cannot name a profile"),
        # The reference's own spelling is not Sift's: a profile holds runtime options only.
        (
            "profiles: {low: {extends: default, adapter_options: {runtime: {threshold: 0.1}}}}",
            "profiles.low.extends",
            "Extra inputs",
        ),
        ("profiles: [low]", "profiles", "dictionary"),
    ],
)
def test_profile_errors_name_the_field(tmp_path: Path, profiles: str, field: str, why: str) -> None:
    path = write(tmp_path, "e.yaml", GLINER + profiles + "\n")
    with pytest.raises(CatalogError) as info:
        Catalog.from_dirs([tmp_path], include_shipped=False)
    message = str(info.value)
    assert str(path) in message and f"field '{field}" in message and why in message, message


def test_a_profile_may_not_take_another_entrys_name(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GLINER + "profiles: {low: {options: {threshold: 0.1}}}\n")
    write(tmp_path, "b.yaml", GLINER.replace("name: x", "name: 'x:low'"))
    with pytest.raises(
        CatalogError, match=r"a\.yaml: field 'profiles\.low': 'x:low' is the name of the entry in .*b\.yaml"
    ):
        Catalog.from_dirs([tmp_path], include_shipped=False)


def test_profiles_are_listed_and_addressed(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GLINER + "profiles: {low: {options: {threshold: 0.1}}, high: {options: {t: 1}}}\n")
    catalog = Catalog.from_dirs([tmp_path], include_shipped=False)
    assert catalog.names() == ["x"]
    assert catalog.listed() == ["x", "x:high", "x:low"]
    assert catalog.addressed("x") == ("x", None)
    assert catalog.addressed("x:low") == ("x", "low")
    # Not a profile of the entry: left as it is, for the registry's 404.
    assert catalog.addressed("x:default") == ("x:default", None)
    assert catalog.addressed("x:nope") == ("x:nope", None)
    assert catalog.addressed("y:low") == ("y:low", None)


def test_shipped_docling_has_the_references_ocr_profile() -> None:
    spec = Catalog.from_dirs([], check_weights=False).get("docling")
    assert {name: profile.options for name, profile in spec.profiles.items()} == {"ocr": {"ocr": True}}
