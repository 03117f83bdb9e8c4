"""The on-disk cache of exported models (ONNX graphs, OpenVINO IR) and of
``auto``'s decisions.

An artifact's key is the model's content hash, the backend, the artifact's
precision and the versions of every library that wrote or reads it, so a
changed weight file or an upgraded library never loads a stale graph. Each
artifact folder holds a ``manifest.json`` with the sha256 of every file; a
folder whose files do not match (a crash mid-write, a flipped byte) is rebuilt.
A cache folder that cannot be written is replaced, with a warning, by a
temporary folder of this process (exports then happen on every start). When no
folder can be written at all, or an export finds the disk full, the load serves
on PyTorch (backends.choice), never fails.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Bump when the layout or the export itself changes: old artifacts are then ignored.
FORMAT_VERSION = "1"
MANIFEST = "manifest.json"
# Libraries whose versions decide whether an artifact (or a decision) still holds.
LIBRARIES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "openvino")
_SKIP_SUFFIXES = (".md", ".lock")
_fallback_dir: Path | None = None


# A write refused for want of room or of rights: the cache cannot take an export now.
_CANNOT_WRITE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


def cannot_write(exc: BaseException) -> OSError | None:
    """The OSError (full disk, quota, read-only, no permission) behind ``exc`` or its
    causes, if that is why it failed; None when it failed for another reason."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _CANNOT_WRITE:
            return current
        current = current.__cause__ or current.__context__
    return None


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    versions: dict[str, str] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/sift/artifacts`` (``~/.cache`` by default); the cache_dir
    setting replaces it (it reaches the store as ``LoadContext.cache_dir``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sift" / "artifacts"


def probe_write(folder: Path) -> None:
    """Raise ``OSError`` unless a file can be created in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".probe-", dir=folder)
    os.close(fd)
    os.unlink(name)


def usable_cache_dir(folder: Path | None) -> Path:
    """``folder`` (default: ``default_cache_dir()``) when writable; otherwise a
    temporary folder for this process, with a warning."""
    global _fallback_dir
    wanted = folder or default_cache_dir()
    try:
        probe_write(wanted)
        return wanted
    except OSError as exc:
        if _fallback_dir is None or not _fallback_dir.is_dir():
            _fallback_dir = Path(tempfile.mkdtemp(prefix="sift-artifacts-"))
        log.warning(
            "artifact cache %s is not writable (%s); using %s for this process: exported models "
            "will not be reused by the next start",
            wanted,
            exc,
            _fallback_dir,
        )
        return _fallback_dir


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def content_hash(folder: Path, cache: Path | None = None) -> str:
    """One sha256 over every file of a model folder (names and contents).

    Hashing ~100 MB of weights costs a tenth of a second; with ``cache`` the
    per-file hashes are remembered by (path, size, mtime), so an unchanged
    folder is not read again."""
    memo_path = cache / "content-hashes.json" if cache is not None else None
    memo: dict[str, Any] = {}
    if memo_path is not None and memo_path.is_file():
        with contextlib.suppress(OSError, ValueError):
            memo = json.loads(memo_path.read_text(encoding="utf-8"))
    digest = hashlib.sha256()
    changed = False
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel.startswith(".") or path.suffix in _SKIP_SUFFIXES or "/." in rel:
            continue
        stat = path.stat()
        stamp = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        file_hash = memo.get(stamp)
        if not isinstance(file_hash, str):
            file_hash = sha256_file(path)
            memo[stamp] = file_hash
            changed = True
        digest.update(f"{rel}\0{file_hash}\n".encode())
    if changed and memo_path is not None:
        with contextlib.suppress(OSError):
            write_atomic(memo_path, json.dumps(memo))
    return digest.hexdigest()


def artifact_key(parts: Mapping[str, Any]) -> str:
    text = json.dumps({"format": FORMAT_VERSION, **parts}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def verify(folder: Path) -> bool:
    """True when ``folder`` holds a manifest and every file it lists, unchanged."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files: Mapping[str, str] = manifest["files"]
        return bool(files) and all(sha256_file(folder / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure_artifact(
    cache: Path,
    kind: str,
    parts: Mapping[str, Any],
    build: Callable[[Path], None],
    what: str,
) -> Path:
    """The folder of the artifact keyed by ``parts``; built with ``build(tmp_folder)``
    when missing or corrupted. ``what`` names it in the log."""
    key = artifact_key(parts)
    folder = cache / kind / key
    if folder.is_dir():
        if verify(folder):
            log.info("%s: using cached %s", what, folder)
            return folder
        log.warning("%s: cached artifact %s is incomplete or corrupted; rebuilding it", what, folder)
        shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=folder.parent))
    try:
        log.info("%s: exporting (first start with this model and library versions; cached in %s)", what, folder)
        build(tmp)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"key": key, "parts": dict(parts), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
        try:
            os.replace(tmp, folder)
        except OSError:
            # Another process finished the same export first: use theirs when it verifies.
            if not verify(folder):
                raise
        log.info("%s: export done", what)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def read_decision(cache: Path, key: str) -> dict[str, Any] | None:
    path = cache / "decisions" / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_decision(cache: Path, key: str, decision: Mapping[str, Any]) -> None:
    try:
        write_atomic(cache / "decisions" / f"{key}.json", json.dumps(decision, indent=2))
    except OSError as exc:
        log.warning("could not record the backend decision in %s: %s", cache, exc)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
