"""The reference server's models folder: one SIE model config per bench model,
naming the same local weights Sift serves (no hub), under the same model id,
so both arms answer the same URL with the same forward."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

import sift_server

# Sift adapter name → (SIE adapter, SIE task block, SIE adapter options).
_ADAPTERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "sentence-embedder": (
        "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter",
        "encode",
        {"loadtime": {"trust_remote_code": False}, "runtime": {"pooling": "mean", "normalize": True}},
    ),
    "gliclass": (
        "sie_server.adapters.gliclass:GLiClassAdapter",
        "extract",
        # Every label scored (no threshold), eager forwards: what Sift's adapter does on a CPU.
        {"loadtime": {"classification_type": "multi-label", "cuda_graphs": "off"}, "runtime": {"threshold": 0.0}},
    ),
}


class ReferenceModelError(ValueError):
    """The bench model cannot be given to the reference server."""


def _catalog_entry(model: str, catalogs: Sequence[Path]) -> tuple[dict[str, Any], Path]:
    builtin = Path(sift_server.__file__).parent / "catalog"
    for folder in (*catalogs, builtin):
        for path in sorted(Path(folder).glob("*.y*ml")):
            entry = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(entry, dict) and entry.get("name") == model:
                return entry, path
    raise ReferenceModelError(f"model {model!r} is in no catalog given to the bench")


def _weights(entry: dict[str, Any], where: Path) -> Path:
    source = entry.get("source") or {}
    if "path" in source:
        folder = Path(source["path"])
        return folder if folder.is_absolute() else (where.parent / folder).resolve()
    if "package" in source:
        package = importlib.import_module(source["package"])
        return Path(str(package.__file__)).parent / str(source.get("package_subdir", ""))
    name = entry["name"]
    raise ReferenceModelError(f"model {name!r} has no local weights (source {source}); the reference is offline")


def reference_config(model: str, catalogs: Sequence[Path]) -> dict[str, Any]:
    """The SIE model config serving ``model`` from the weights its Sift catalog entry names."""
    entry, where = _catalog_entry(model, catalogs)
    adapter = entry.get("adapter")
    if adapter not in _ADAPTERS:
        raise ReferenceModelError(f"the reference arm serves {', '.join(_ADAPTERS)} models; {model!r} is {adapter!r}")
    adapter_path, task, options = _ADAPTERS[adapter]
    weights = _weights(entry, where)
    tasks: dict[str, Any] = {"encode": None, "score": None, "extract": None}
    if task == "encode":
        hidden = json.loads((weights / "config.json").read_text(encoding="utf-8"))["hidden_size"]
        tasks["encode"] = {"dense": {"dim": int(hidden)}, "sparse": None, "multivector": None}
    else:
        tasks["extract"] = {}
    return {
        "sie_id": model,
        "weights_path": str(weights),
        "inputs": {"text": True, "image": False, "audio": False, "video": False},
        "tasks": tasks,
        "max_sequence_length": int(entry.get("max_sequence_length", 256)),
        "profiles": {"default": {"max_batch_tokens": 16384, "adapter_path": adapter_path, "adapter_options": options}},
    }


def write_models_dir(folder: Path, model: str, catalogs: Sequence[Path]) -> Path:
    """A models folder holding only ``model``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    config = reference_config(model, catalogs)
    (folder / (model.replace("/", "__") + ".yaml")).write_text(yaml.safe_dump(config, sort_keys=False), "utf-8")
    return folder
