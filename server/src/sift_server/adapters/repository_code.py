"""Repository code: the one way Sift runs a model folder's own Python (``auto_map``).

Some architectures ship as Python files in the model's repository (Jina v2, Nomic,
gte-multilingual), which transformers runs under ``trust_remote_code``. Sift runs such
code only when the catalog entry pins it: ``repository_code`` maps every Python file of
the local model folder to its SHA-256. The folder must hold exactly those files with
exactly those digests, and every class ``auto_map`` names must come from one of them: code
from another repository (``org/repo--module.Class``) is refused, and nothing is ever
fetched (loads are ``local_files_only``). Without the pin, an ``auto_map`` folder is
refused at load, with the digests an operator who has read the files can pin.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from sift_server.adapters._refusal import UnservableModel

# file path in the folder (POSIX, relative) -> SHA-256 hex digest
PinnedCode = Mapping[str, str]


def code_digests(folder: Path) -> dict[str, str]:
    """Every Python file under ``folder`` with its SHA-256, by relative POSIX path."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.py"))
        if path.is_file()
    }


def auto_map_modules(auto_map: Mapping[str, object]) -> list[str]:
    """The ``module.Class`` references of a config's ``auto_map`` (tokenizer entries are pairs)."""
    references: list[str] = []
    for value in auto_map.values():
        items: Iterable[object] = value if isinstance(value, (list, tuple)) else (value,)
        references += [item for item in items if isinstance(item, str)]
    return references


def _pin_hint(digests: Mapping[str, str]) -> str:
    lines = "".join(f"\n    {name}: {digest}" for name, digest in digests.items())
    return (
        "After reading those files, pin them in the catalog entry to run them "
        f"(docs/models.md, 'Repository code'):\n  repository_code:{lines}"
    )


def check_repository_code(folder: Path, adapter: str, auto_map: Mapping[str, object], pinned: PinnedCode) -> None:
    """Refuse unless ``pinned`` covers exactly the folder's Python files and ``auto_map``
    names only classes from them."""
    digests = code_digests(folder)
    prefix = f"{adapter} cannot serve {folder}"
    if not pinned:
        raise UnservableModel(
            f"{prefix}: its config.json maps the architecture to repository code (auto_map), which Sift runs "
            f"only when the catalog entry pins it. {_pin_hint(digests)}"
        )
    for reference in auto_map_modules(auto_map):
        if "--" in reference:
            raise UnservableModel(
                f"{prefix}: auto_map takes {reference!r} from another repository; Sift runs only the pinned "
                "files of the model's own folder and never fetches code"
            )
        module = reference.rsplit(".", 1)[0].replace(".", "/") + ".py"
        if module not in pinned:
            raise UnservableModel(f"{prefix}: auto_map names {reference!r}, but {module} is not pinned")
    unpinned = {name: digest for name, digest in digests.items() if name not in pinned}
    if unpinned:
        raise UnservableModel(f"{prefix}: the folder holds Python files the entry does not pin. {_pin_hint(unpinned)}")
    missing = sorted(name for name in pinned if name not in digests)
    if missing:
        raise UnservableModel(f"{prefix}: the entry pins {', '.join(missing)}, which the folder does not hold")
    changed = sorted(name for name, digest in pinned.items() if digests[name] != digest.lower())
    if changed:
        raise UnservableModel(
            f"{prefix}: {', '.join(changed)} changed since it was pinned (its SHA-256 is "
            f"{', '.join(digests[name] for name in changed)}); read the new code before pinning it"
        )
