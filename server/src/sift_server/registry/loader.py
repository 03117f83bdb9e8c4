"""Turn a catalog entry into a loaded adapter (runs in a thread: it is slow)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from sift_server.adapters._lean_imports import import_transformers_models
from sift_server.adapters.backends.choice import NotDecided
from sift_server.adapters.backends.select import LoadPlan, plan_load
from sift_server.adapters.base import Adapter, LoadContext
from sift_server.adapters.records import record_of
from sift_server.registry.catalog import ModelSpec, resolve_local_path

log = logging.getLogger(__name__)


def default_torch_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def weights_folder(spec: ModelSpec) -> Path:
    local = resolve_local_path(spec)
    if local is not None:
        return local
    if spec.source is None:  # a remote model: no folder
        return Path()
    assert spec.source.hf is not None
    # Imported here: only hub-sourced models need it. Honours HF_HUB_OFFLINE.
    from huggingface_hub import snapshot_download

    if record_of(spec.adapter).weights_optional:
        return optional_snapshot(spec.source.hf, spec.source.revision)
    return Path(snapshot_download(spec.source.hf, revision=spec.source.revision))


def optional_snapshot(repo: str, revision: str | None) -> Path:
    """A weights-optional model's hub folder if it is in the local cache, never a download;
    else the cache folder it would be in (which does not exist: the adapter says what is missing)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"


def split_backend(override: str | None) -> tuple[str | None, str | None]:
    """The backend setting (``backend`` or ``backend:precision``) as (backend, precision);
    (None, None) when there is none and each entry's own backend holds."""
    if not override or not override.strip():
        return None, None
    backend, _, precision = override.strip().partition(":")
    return backend.strip(), (precision.strip() or None)


def adapter_class(name: str) -> type[Adapter]:
    return record_of(name).adapter_class()


def load_plan(spec: ModelSpec, backend_override: str | None = None) -> LoadPlan:
    """What a load of ``spec`` asks its adapter for, and whether it serves on the
    reference first while ``auto`` decides (the adapters' rules: ``backends.plan_load``).
    ``backend_override`` (the backend setting) replaces every entry's backend and precision."""
    return plan_load(
        spec.backend,
        spec.precision,
        override=split_backend(backend_override),
        loras=bool(spec.loras),
        repository_code=bool(spec.repository_code),
        runs_on=record_of(spec.adapter).backends,
    )


def load_adapter(
    spec: ModelSpec,
    torch_threads: int = 0,
    *,
    backend_override: str | None = None,
    rechoose_backend: bool = False,
    cache_dir: Path | None = None,
    recorded_only: bool = False,
    prepare_only: bool = False,
) -> Adapter:
    """``prepare_only``: what ``prepare`` needs and no network, where the adapter can
    (``Adapter.loads_prepare_only``; the caller checks). ``rechoose_backend``: ``auto``
    times the candidates again instead of reusing the recorded decision; ``cache_dir``:
    exported artifacts and decisions (None: the artifact store's default).

    An ``auto`` entry with a recorded decision opens the chosen runtime directly:
    transformers' model code (and with it PyTorch) is imported only when the
    load goes on to decide, or the choice is PyTorch. ``recorded_only``: never
    decide; raise ``NotDecided`` where nothing is recorded."""
    plan = load_plan(spec, backend_override)
    if plan.note is not None:
        log.info("model %s: %s", spec.name, plan.note)
    ctx = LoadContext(
        path=weights_folder(spec),
        options=spec.options,
        max_sequence_length=spec.max_sequence_length,
        torch_threads=torch_threads or default_torch_threads(),
        backend=plan.backend,
        precision=plan.precision,
        tolerance=spec.tolerance,
        rechoose_backend=rechoose_backend,
        cache_dir=cache_dir,
        repository_code=spec.repository_code,
        remote=spec.remote.model_dump() if spec.remote is not None else None,
    )
    adapter_type = adapter_class(spec.adapter)
    if prepare_only:
        return adapter_type.load(dataclasses.replace(ctx, prepare_only=True))
    lean = plan.may_run_torch and adapter_type.transformers_models
    if lean and not adapter_type.loads_runtime_without_torch:
        # Its load imports transformers whatever runs: import the model code lean first.
        import_transformers_models()
    if plan.backend == "auto" and not rechoose_backend:
        try:
            return adapter_type.load(dataclasses.replace(ctx, recorded_only=True))
        except NotDecided:
            if recorded_only:
                raise
    elif recorded_only:
        raise NotDecided(f"model {spec.name}: not an auto entry, or asked to decide again")
    if lean:
        # PyTorch runs, or times the candidates: transformers' model code will be imported.
        import_transformers_models()
    return adapter_type.load(ctx)


def load_recorded(spec: ModelSpec, torch_threads: int = 0, **settings: Any) -> Adapter | None:
    """``spec`` opened on its recorded ``auto`` decision, or None where none is recorded."""
    try:
        return load_adapter(spec, torch_threads, recorded_only=True, **settings)
    except NotDecided as exc:
        log.info("model %s: %s", spec.name, exc)
        return None


def estimate_bytes(spec: ModelSpec) -> int:
    """Weights on disk approximate memory after load (for admission under the budget)."""
    try:
        folder = resolve_local_path(spec)
    except ValueError:
        return 0
    if folder is None:
        return 0
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or sum(
        p.stat().st_size for p in folder.glob("*.bin")
    )
