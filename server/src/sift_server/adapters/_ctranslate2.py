"""CTranslate2 models from a local folder: a CTranslate2 artifact as it is, or a
Hugging Face (transformers) folder converted once, at float32, into the artifact
cache (``ctranslate2.converters.TransformersConverter``), keyed by the folder's
content and the converting libraries' versions. Shared by the ``ctranslate2``
generation adapter (encoder-decoder translation models) and the ``whisper``
adapter's CTranslate2 engine. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

from sift_server.adapters.backends import artifacts

# The file every CTranslate2 model folder holds (the converted weights).
MODEL_FILE = "model.bin"
# Libraries whose versions decide whether a converted artifact still holds.
LIBRARIES = ("ctranslate2", "transformers", "torch")


def is_artifact(folder: Path) -> bool:
    """Whether ``folder`` is already a CTranslate2 model (``model.bin``)."""
    return (folder / MODEL_FILE).is_file()


def converted(folder: Path, cache_dir: Path | None, kind: str) -> Path:
    """``folder`` itself when it is a CTranslate2 artifact; otherwise its float32
    conversion in the artifact cache (made on the first load, verified after)."""
    if is_artifact(folder):
        return folder
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} holds neither a CTranslate2 model ({MODEL_FILE}) nor a transformers config.json")
    cache = artifacts.usable_cache_dir(cache_dir)
    parts = {
        "model": artifacts.content_hash(folder, cache),
        "graph": kind,
        "backend": "ctranslate2",
        "precision": "float32",
        "versions": artifacts.library_versions(LIBRARIES),
    }

    def convert(dest: Path) -> None:
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(folder)).convert(str(dest), quantization="float32", force=True)

    return artifacts.ensure_artifact(cache, "ctranslate2", parts, convert, f"{kind} {folder.name} ctranslate2")
