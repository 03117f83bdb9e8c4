"""Arms: what one server process of a run is made of.

A *policy arm* runs the current tree (the installed ``sift_server``) with one
batching policy. A *revision arm* runs the code of a git revision: the ref is
resolved to a commit id once, that commit (never the ref again) is archived
into a folder of its own, and a manifest records the ref, the commit id, the
tree id and the sha256 of every archived file. A branch that moves while we
prepare therefore cannot change what is measured, and the manifest is checked
again before every server start. The revision's server runs from its folder
(``PYTHONPATH=<folder>/server/src``) with the current virtual environment's
dependencies.

A *backend arm* runs the current tree with the adaptive policy and every model
on one backend (``sift serve --backend``): ``torch`` (PyTorch fp32, the path
before backends existed), ``onnx``, ``openvino``, ``auto``, or any of them with
``:PRECISION`` (``openvino:fp32``, ``onnx:int8``, ``torch:bf16``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

_SKIP_PARTS = frozenset({"__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


class ArmError(RuntimeError):
    """An arm cannot be prepared (unknown ref, no server in the revision, ...)."""


@dataclass(slots=True)
class Arm:
    name: str
    policy: str
    kind: Literal["policy", "rev", "gateway", "reference"] = "policy"
    ref: str | None = None
    commit: str | None = None
    folder: Path | None = None
    manifest: dict[str, Any] | None = field(default=None, repr=False)
    backend: str | None = None
    # A reference arm's server command (None: the reference venv's sie-server).
    launcher: list[str] | None = None
    # Further ``sift serve`` flags (the open-loop arm's ``--open-loop-rules``).
    flags: tuple[str, ...] = ()

    @property
    def server_args(self) -> list[str]:
        """Extra ``sift serve`` arguments of this arm."""
        return [*self.flags, *(["--backend", self.backend] if self.backend else [])]

    @property
    def pythonpath(self) -> Path | None:
        """The source folder a revision's server imports from (None: the installed tree)."""
        return self.folder / "server" / "src" if self.folder is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "policy": self.policy,
            "kind": self.kind,
            "ref": self.ref,
            "commit": self.commit,
            "folder": str(self.folder) if self.folder else None,
            "manifest_digest": self.manifest.get("digest") if self.manifest else None,
            "backend": self.backend,
            "flags": list(self.flags),
        }


def policy_arm(policy: str) -> Arm:
    return Arm(name=policy, policy=policy)


OPEN_LOOP_ARM = "adaptive-open"


def open_loop_arm() -> Arm:
    """The current tree's adaptive policy with the engine's open-loop rules on
    (``sift serve --open-loop-rules``; the simulator's arm of the same name)."""
    return Arm(name=OPEN_LOOP_ARM, policy="adaptive", flags=("--open-loop-rules",))


BACKEND_ARMS = ("torch", "onnx", "openvino", "auto")
_ARM_PRECISIONS = ("fp32", "bf16", "fp16", "int8")
# A bare "torch" arm is today's path exactly: PyTorch fp32, nothing left to choose.
_BARE = {"torch": "torch:fp32"}


def is_backend_arm(name: str) -> bool:
    backend, _, precision = name.partition(":")
    return backend in BACKEND_ARMS and (not precision or precision in _ARM_PRECISIONS)


def backend_arm(name: str, policy: str = "adaptive") -> Arm:
    """An arm of the current tree serving every model on backend ``name``."""
    if not is_backend_arm(name):
        raise ArmError(f"not a backend arm: {name!r} (one of {', '.join(BACKEND_ARMS)}, optionally :PRECISION)")
    return Arm(name=name, policy=policy, backend=_BARE.get(name, name))


GATEWAY_ARM = "gateway"


def is_gateway_arm(name: str) -> bool:
    """``gateway`` (the adaptive policy) or ``gateway:POLICY``."""
    from sift_server.engine.policy import POLICIES

    head, _, policy = name.partition(":")
    return head == GATEWAY_ARM and (not policy or policy in POLICIES)


def gateway_arm(name: str) -> Arm:
    """The current tree through the queue path: nats-server, a gateway, one worker
    running the policy (bench/cluster_server.py), instead of one ``sift serve``."""
    if not is_gateway_arm(name):
        raise ArmError(f"not a gateway arm: {name!r} (gateway or gateway:POLICY)")
    return Arm(name=name, policy=name.partition(":")[2] or "adaptive", kind="gateway")


REFERENCE_ARM = "reference"
# What the reference arm runs: the released SIE server, which batches in a timed window.
REFERENCE_RELEASE = "sie-server==0.10.1"


def reference_arm(launcher: list[str] | None = None) -> Arm:
    """The released SIE server on the bench's model, from its own virtual
    environment (``sift bench reference-setup``); ``launcher`` replaces its
    command (tests run a stand-in)."""
    return Arm(name=REFERENCE_ARM, policy="sie-timed-window", kind="reference", launcher=launcher)


# ---- hashing ------------------------------------------------------------


def hash_tree(folder: Path, exclude: Sequence[str] = ()) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every regular file (caches, and the
    top-level entries named in ``exclude``, skipped)."""
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in _SKIP_PARTS for part in rel.parts) or path.suffix == ".pyc" or rel.parts[0] in exclude:
            continue
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                files[rel.as_posix()] = hashlib.file_digest(handle, "sha256").hexdigest()
    return files


def tree_digest(files: Mapping[str, str]) -> str:
    """One sha256 over the sorted (path, hash) list: equal digests, equal trees."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\n".encode())
    return digest.hexdigest()


# ---- git ----------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ArmError(f"git {' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


def repo_root(start: Path) -> Path:
    return Path(_git(start, "rev-parse", "--show-toplevel"))


def resolve_commit(repo: Path, ref: str) -> str:
    """The full commit id ``ref`` names right now."""
    if ref.startswith("-"):
        raise ArmError(f"not a revision: {ref!r}")
    try:
        return _git(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    except ArmError as exc:
        raise ArmError(f"unknown revision {ref!r}: {exc}") from exc


def archive_commit(repo: Path, commit: str, dest: Path) -> None:
    """Extract the tree of ``commit`` (a full id, not a ref) into ``dest``."""
    result = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True, check=False
    )
    if result.returncode != 0:
        raise ArmError(f"git archive {commit} failed: {result.stderr.decode(errors='replace').strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(result.stdout), mode="r:") as tar:
        tar.extractall(dest, filter="data")


def build_manifest(repo: Path, ref: str, commit: str, folder: Path) -> dict[str, Any]:
    files = hash_tree(folder)
    return {
        "ref": ref,
        "commit": commit,
        "tree": _git(repo, "rev-parse", f"{commit}^{{tree}}"),
        "repo": str(repo),
        "folder": str(folder),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
        "digest": tree_digest(files),
    }


def verify_manifest(manifest: Mapping[str, Any], folder: Path) -> list[str]:
    """Differences between ``folder`` and its manifest (empty: untouched)."""
    expected: Mapping[str, str] = manifest["files"]
    actual = hash_tree(folder)
    problems = [f"changed: {name}" for name in sorted(expected) if name in actual and actual[name] != expected[name]]
    problems += [f"missing: {name}" for name in sorted(expected) if name not in actual]
    problems += [f"added: {name}" for name in sorted(actual) if name not in expected]
    return problems


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "rev"


def prepare_rev_arm(repo: Path, ref: str, policy: str, work_root: Path, *, name: str | None = None) -> Arm:
    """Resolve ``ref`` once, archive that commit under ``work_root``, hash it.

    The manifest notes it when the ref has moved by the end of the preparation
    (the archived commit is still the one resolved first)."""
    commit = resolve_commit(repo, ref)
    folder = work_root / f"{_safe(ref)}-{commit[:12]}"
    if folder.exists():
        raise ArmError(f"{folder} already exists")
    archive_commit(repo, commit, folder)
    if not (folder / "server" / "src" / "sift_server" / "__init__.py").is_file():
        raise ArmError(f"revision {ref} ({commit[:12]}) has no server/src/sift_server to run")
    manifest = build_manifest(repo, ref, commit, folder)
    try:
        now = resolve_commit(repo, ref)
    except ArmError:
        now = None
    manifest["ref_moved_to"] = now if now != commit else None
    return Arm(
        name=name or f"rev:{ref}", policy=policy, kind="rev", ref=ref, commit=commit, folder=folder, manifest=manifest
    )


def rev_backend_arms(arm: Arm, backends: Sequence[str]) -> list[Arm]:
    """A revision arm once per backend (``--rev-backend``), sharing its archived
    folder: ``rev:REF/BACKEND``, its server started with ``--backend BACKEND``.
    No backends: the arm itself (the revision's default backends)."""
    import dataclasses

    arms = []
    for name in dict.fromkeys(backends):
        if not is_backend_arm(name):
            raise ArmError(f"not a backend: {name!r} (one of {', '.join(BACKEND_ARMS)}, optionally :PRECISION)")
        arms.append(dataclasses.replace(arm, name=f"{arm.name}/{name}", backend=_BARE.get(name, name)))
    return arms or [arm]


def check_rev_imports(arm: Arm) -> str:
    """Where ``sift_server`` is imported from under the arm's PYTHONPATH; raises
    when that is not the arm's folder (an install would shadow the revision)."""
    if arm.pythonpath is None:
        raise ArmError(f"arm {arm.name} is not a revision arm")
    env = {**os.environ, "PYTHONPATH": str(arm.pythonpath)}
    result = subprocess.run(
        [sys.executable, "-c", "import sift_server, sys; sys.stdout.write(sift_server.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    where = result.stdout.strip()
    if result.returncode != 0 or not Path(where).resolve().is_relative_to(arm.pythonpath.resolve()):
        raise ArmError(
            f"revision {arm.ref}: sift_server imports from {where or result.stderr.strip()!r}, "
            f"not from {arm.pythonpath}"
        )
    return where


def changed_files(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Files added, removed or modified between two ``hash_tree`` maps."""
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def write_manifest(arm: Arm, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_safe(arm.name)}.manifest.json"
    path.write_text(json.dumps(arm.manifest, indent=2) + "\n", encoding="utf-8")
    return path


# The instrument is not the thing measured: edits to the bench itself do not
# change what a policy arm's server runs.
INSTRUMENT = ("bench",)


def worktree_state(package_dir: Path) -> dict[str, Any]:
    """What the policy arms run: the installed package's files (the bench's own
    excluded), and the git state of the checkout it lives in (when it is one)."""
    files = hash_tree(package_dir, INSTRUMENT)
    state: dict[str, Any] = {"package_dir": str(package_dir), "digest": tree_digest(files), "files": files}
    try:
        root = repo_root(package_dir)
        state["repo"] = str(root)
        state["head"] = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--", str(package_dir))
        state["dirty"] = [line for line in status.splitlines() if line.strip()]
    except ArmError:
        state["repo"] = None
    return state
