"""The model catalog: one YAML file per model.

Errors are found at start and name the file and the field, so an operator
never meets a typo at the first request.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sift_server.adapters.backends.request import BackendName, PrecisionName, check_pair
from sift_server.adapters.base import Task
from sift_server.adapters.records import RECORDS

# The longest model name: requests that name a longer one are refused before the
# name is decoded (OpenAI's body, wire/split.py), the registry answers a short 404.
MAX_MODEL_NAME_CHARS = 256

SHIPPED_CATALOG = Path(str(importlib.resources.files("sift_server") / "catalog"))


class CatalogError(ValueError):
    pass


class Source(BaseModel):
    """Where the weights are: exactly one of a Python package, a local folder, or a hub id."""

    model_config = ConfigDict(extra="forbid")

    package: str | None = None
    package_subdir: str = "model"
    path: Path | None = None
    hf: str | None = None
    revision: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [name for name in ("package", "path", "hf") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("give exactly one of package, path or hf")
        return self


class LoraSource(BaseModel):
    """One LoRA adapter of a model: a local folder (relative to the catalog file) or a hub id."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None
    hf: str | None = None
    revision: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> LoraSource:
        if (self.path is None) == (self.hf is None):
            raise ValueError("give exactly one of path or hf")
        return self


class Remote(BaseModel):
    """An operator's OpenAI-compatible upstream that serves this model (adapter
    ``openai-remote``), as the reference's remote generation profiles name theirs:
    where it is, the model id it serves, and the environment variable holding its
    key (the key itself never appears in the catalog, a log or an error)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    connect_timeout_s: float = Field(default=5.0, gt=0, le=300)
    # The longest wait for the upstream's next bytes: its first token, or the next one.
    read_timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _plain_url(self) -> Remote:
        """http(s), a host, no credentials, query or fragment (messages never repeat the URL)."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(self.base_url)
        except ValueError:
            raise ValueError("base_url is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http or https URL with a host")
        if "@" in parts.netloc or parts.query or parts.fragment:
            raise ValueError("base_url must not carry credentials, a query or a fragment")
        self.base_url = self.base_url.rstrip("/")
        return self


class Batching(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_batch_requests: int | None = Field(default=None, ge=1)
    max_batch_cost: int | None = Field(default=None, ge=1)
    max_queue_items: int | None = Field(default=None, ge=1)


# A profile's name: it follows the model's name after a ':' in a request's path.
PROFILE_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"


class Profile(BaseModel):
    """A named set of runtime options (API.md §1.1, the reference's
    ``adapter_options.runtime`` of a profile that extends ``default``): the same
    weights and load options as the entry, these options under each request's own."""

    model_config = ConfigDict(extra="forbid")

    options: dict[str, Any] = Field(min_length=1)

    @model_validator(mode="after")
    def _no_profile_key(self) -> Profile:
        if "profile" in self.options:
            raise ValueError("a profile's options cannot name a profile")
        return self


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    adapter: str
    # Where the weights are; none for a remote model (``remote`` instead).
    source: Source | None = None
    remote: Remote | None = None
    tasks: list[Task] = Field(min_length=1)
    max_sequence_length: int | None = Field(default=None, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)
    # Where the forward runs (adapters/backends/): auto picks the fastest backend
    # whose probe outputs match PyTorch fp32 within ``tolerance`` (min cosine for
    # embeddings, relative score difference for rerankers); int8 is opt-in only.
    backend: BackendName = "auto"
    precision: PrecisionName | None = None
    tolerance: float | None = Field(default=None, gt=0)
    batching: Batching = Field(default_factory=Batching)
    # LoRA adapters served on top of this model, by the name requests use (options.lora).
    loras: dict[str, LoraSource] = Field(default_factory=dict)
    # At most this many LoRAs stay loaded; the least recently used one is dropped.
    max_loaded_loras: int = Field(default=4, ge=1)
    # Named runtime-option sets, addressed as ``{name}:{profile}`` or by options.profile.
    profiles: dict[str, Profile] = Field(default_factory=dict)
    # The folder's own Python files (auto_map architectures) the operator has read and
    # allows to run, each with its SHA-256 (adapters/repository_code.py); empty: never run.
    repository_code: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    file: Path | None = None

    @model_validator(mode="after")
    def _known_adapter(self) -> ModelSpec:
        """The entry against its adapter's record and the backends' vocabulary."""
        record = RECORDS.get(self.adapter)
        if record is None:
            raise ValueError(f"unknown adapter {self.adapter!r}; known: {', '.join(sorted(RECORDS))}")
        unserved = [task for task in self.tasks if task not in record.tasks]
        if unserved:
            raise ValueError(
                f"adapter {self.adapter} serves {', '.join(sorted(record.tasks))}, not {', '.join(unserved)}"
            )
        if record.remote and (self.remote is None or self.source is not None):
            raise ValueError(f"adapter {self.adapter} forwards to an upstream: give 'remote', not 'source'")
        if not record.remote and (self.source is None or self.remote is not None):
            raise ValueError(f"adapter {self.adapter} serves local weights: give 'source', not 'remote'")
        if self.backend != "auto" and self.backend not in record.backends:
            raise ValueError(f"adapter {self.adapter} runs on {', '.join(sorted(record.backends))}, not {self.backend}")
        check_pair(self.backend, self.precision)
        if self.repository_code:
            self._check_repository_code(record.repository_code)
        return self

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, profiles: dict[str, Profile]) -> dict[str, Profile]:
        for profile in profiles:
            if profile == "default":
                raise ValueError("'default' is reserved: the entry itself is the default profile")
            if not re.fullmatch(PROFILE_NAME, profile):
                raise ValueError(
                    f"{profile!r} is not a profile name (letters, digits, '.', '_' and '-', "
                    "at most 64, starting with a letter or digit)"
                )
        return profiles

    def _check_repository_code(self, allowed: bool) -> None:
        if not allowed:
            raise ValueError(f"adapter {self.adapter} does not run repository code; only sentence-embedder does")
        if self.source is not None and self.source.hf is not None and not self.source.revision:
            raise ValueError("repository code from a hub source needs source.revision (a pinned commit)")
        if self.backend not in ("auto", "torch"):
            raise ValueError(f"repository code runs on torch, not {self.backend}")
        for name, digest in self.repository_code.items():
            if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
                raise ValueError(f"repository_code[{name!r}] must be a SHA-256 hex digest (64 hex digits)")
        return None


def resolve_local_path(spec: ModelSpec) -> Path | None:
    """The weights folder for package and path sources (None for hub sources)."""
    source = spec.source
    if source is None:
        return None
    if source.package:
        if importlib.util.find_spec(source.package) is None:
            raise CatalogError(
                f"{spec.file}: field 'source.package': Python package {source.package!r} is not installed"
            )
        folder = Path(str(importlib.resources.files(source.package) / source.package_subdir))
    elif source.path is not None:
        folder = source.path
        if not folder.is_absolute() and spec.file is not None:
            folder = spec.file.parent / folder
    else:
        return None
    if spec.adapter in RECORDS and RECORDS[spec.adapter].weights_optional:
        return folder
    if not folder.is_dir():
        raise CatalogError(f"{spec.file}: field 'source': model folder {folder} does not exist")
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise CatalogError(f"{spec.file}: field 'source': no weights (*.safetensors or *.bin) in {folder}")
    return folder


def _format_validation(path: Path, error: ValidationError) -> str:
    problems = []
    for issue in error.errors():
        field = ".".join(str(part) for part in issue["loc"]) or "(top level)"
        problems.append(f"field '{field}': {issue['msg']}")
    return f"{path}: " + "; ".join(problems)


def load_spec(path: Path) -> ModelSpec:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{path}: expected a mapping of fields at the top level")
    try:
        spec = ModelSpec.model_validate({**raw, "file": path})
    except ValidationError as exc:
        raise CatalogError(_format_validation(path, exc)) from exc
    return spec


class Catalog:
    def __init__(self, specs: Iterable[ModelSpec]) -> None:
        self.specs: dict[str, ModelSpec] = {}
        for spec in specs:
            if spec.name in self.specs:
                other = self.specs[spec.name].file
                raise CatalogError(f"{spec.file}: field 'name': {spec.name!r} is already defined in {other}")
            self.specs[spec.name] = spec
        for spec in self.specs.values():
            for profile in spec.profiles:
                taken = self.specs.get(f"{spec.name}:{profile}")
                if taken is not None:
                    raise CatalogError(
                        f"{spec.file}: field 'profiles.{profile}': '{spec.name}:{profile}' is the name of "
                        f"the entry in {taken.file}"
                    )

    @classmethod
    def from_dirs(cls, dirs: Iterable[Path], *, include_shipped: bool = True, check_weights: bool = True) -> Catalog:
        folders = ([SHIPPED_CATALOG] if include_shipped else []) + list(dirs)
        specs = []
        for folder in folders:
            if not folder.is_dir():
                raise CatalogError(f"{folder}: catalog folder does not exist")
            for path in sorted(folder.glob("*.y*ml")):
                specs.append(load_spec(path))
        catalog = cls(specs)
        if check_weights:
            for spec in catalog.specs.values():
                resolve_local_path(spec)
        return catalog

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def get(self, name: str) -> ModelSpec:
        return self.specs[name]

    def names(self) -> list[str]:
        return sorted(self.specs)

    def listed(self) -> list[str]:
        """What ``/v1/models`` lists: every entry, and ``{name}:{profile}`` for each of its profiles."""
        return sorted([*self.specs, *(f"{name}:{p}" for name, spec in self.specs.items() for p in spec.profiles)])

    def addressed(self, model: str) -> tuple[str, str | None]:
        """The entry and profile a requested id names: an entry's name, or
        ``{name}:{profile}`` for one of its profiles (API.md §1.1). Anything else is
        returned as it is, a name no entry has (a 404, as the reference answers an
        unknown ``model:profile``)."""
        if model in self.specs:
            return model, None
        name, sep, profile = model.rpartition(":")
        spec = self.specs.get(name) if sep else None
        if spec is not None and profile in spec.profiles:
            return name, profile
        return model, None
