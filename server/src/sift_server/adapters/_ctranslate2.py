"""CTranslate2 models from a local folder: a CTranslate2 artifact as it is, or a
Hugging Face (transformers) folder converted once, at float32, into the artifact
cache (``ctranslate2.converters.TransformersConverter``), keyed by the folder's
content and the converting libraries' versions. Shared by the ``ctranslate2``
generation adapter (encoder-decoder translation models) and the ``whisper``
adapter's CTranslate2 engine. Nothing is downloaded.

The conversion runs in a child process at nice 19
(adapters/ctranslate2_convert_child.py, through conversion_process.py): its peak
(the transformers model and its converted copy) and its minutes of CPU stay out of
the serving process. It writes into a temporary folder of the cache, renamed into
place only when it succeeded (artifacts.ensure_artifact): a failed or killed
conversion raises :class:`ConversionFailed` and leaves nothing behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sift_server.adapters.backends import artifacts
from sift_server.adapters.conversion_process import ConversionCrashed, ConversionProcess, ConversionTimeout
from sift_server.adapters.load_peak import report_load_peak

# The file every CTranslate2 model folder holds (the converted weights).
MODEL_FILE = "model.bin"
# Libraries whose versions decide whether a converted artifact still holds.
LIBRARIES = ("ctranslate2", "transformers", "torch")
CHILD_MODULE = "sift_server.adapters.ctranslate2_convert_child"
# A fresh interpreter importing torch and transformers, at nice 19 on a busy machine.
START_TIMEOUT_S = 300.0
# madlad400-3b converts in minutes on a quiet machine; the deadline is for a hung child.
CONVERSION_TIMEOUT_S = 4 * 3600.0


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def conversion_peak_bytes(folder: Path) -> int:
    """About what converting ``folder`` holds at its peak: the transformers model as
    PyTorch loads it (in its config's dtype, as the converter asks) and the converted
    float32 copy beside it."""
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors")) or sum(
        p.stat().st_size for p in folder.glob("*.bin")
    )
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32") if isinstance(config, dict) else ""
    return weights + weights * 4 // _DTYPE_BYTES.get(dtype, 4)


class ConversionFailed(RuntimeError):
    """The conversion failed, died or ran past its deadline (the reason says which)."""


def is_artifact(folder: Path) -> bool:
    """Whether ``folder`` is already a CTranslate2 model (``model.bin``)."""
    return (folder / MODEL_FILE).is_file()


def convert_in_child(folder: Path, dest: Path, *, threads: int = 0, timeout_s: float = CONVERSION_TIMEOUT_S) -> None:
    """Convert ``folder`` into ``dest`` (float32) in a child process (``CHILD_MODULE``,
    which tests replace) at nice 19; raises :class:`ConversionFailed` with
    the reason."""
    child = ConversionProcess(CHILD_MODULE, {"parent": os.getpid(), "threads": threads}, START_TIMEOUT_S)
    try:
        status, value = child.call((str(folder), str(dest)), timeout_s)
    except (ConversionCrashed, ConversionTimeout, RuntimeError) as exc:
        raise ConversionFailed(f"converting {folder} to CTranslate2 failed: {exc}") from None
    finally:
        child.stop()
    if status != "ok":
        raise ConversionFailed(f"converting {folder} to CTranslate2 failed: {value}")


def converted(folder: Path, cache_dir: Path | None, kind: str, *, threads: int = 0) -> Path:
    """``folder`` itself when it is a CTranslate2 artifact; otherwise its float32
    conversion in the artifact cache (made on the first load, in a child process,
    verified after)."""
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
        report_load_peak(conversion_peak_bytes(folder))  # the registry counts it while the child runs
        convert_in_child(folder, dest, threads=threads)

    return artifacts.ensure_artifact(cache, "ctranslate2", parts, convert, f"{kind} {folder.name} ctranslate2")
