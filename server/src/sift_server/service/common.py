"""Validation shared by the three primitives."""

from __future__ import annotations

import asyncio
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from sift_server.adapters.base import OverflowPolicy, Task
from sift_server.engine.model_engine import ModelEngine
from sift_server.errors import InputTooLong, InvalidInput, TaskNotSupported
from sift_server.registry.catalog import ModelSpec
from sift_server.registry.registry import ModelRecord, Registry
from sift_server.service.audio import AudioLimits
from sift_server.service.images import ImageLimits
from sift_server.wire.schemas import Item

OVERFLOW_POLICIES: dict[str, OverflowPolicy] = {
    "default": "truncate",
    "truncate": "truncate",
    "truncate_text": "truncate",
    "error": "error",
}


# A model reading N tokens never needs more than N * this many characters of a
# text (a word-piece token is a few characters; this is generous, so that cutting
# here never changes what a truncating model sees in practice). Texts are cut to
# it before tokenizing, so a megabyte of text costs no more than what is read.
CHARS_PER_TOKEN_BOUND = 32


@dataclass(frozen=True, slots=True)
class Limits:
    max_item_bytes: int
    max_items: int
    images: ImageLimits = field(default_factory=ImageLimits)
    audio: AudioLimits = field(default_factory=AudioLimits)


def split_profile(model: str) -> tuple[str, str | None]:
    """``org/name:profile`` addresses a profile by path (API.md §1.1)."""
    name, sep, profile = model.rpartition(":")
    if sep and name and "/" not in profile:
        return name, profile
    return model, None


def catalog_name(catalog: Container[str], model: str) -> str:
    """The catalog's name of the model a path names: generation model ids travel as
    ``Org__Name`` (sie-sdk's path ids), which name ``Org/Name`` when the catalog has no
    ``Org__Name`` itself. Used by ``sift serve``'s generation routes and by the gateway,
    whose queue subject is the catalog name's."""
    if model not in catalog and "__" in model:
        slashed = model.replace("__", "/", 1)
        if slashed in catalog:
            return slashed
    return model


def profile_options(spec: ModelSpec, path_profile: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options the adapter sees, as the reference merges them (API.md §2.1): the
    selected profile's options under the request's own (the request's win), ``profile``
    dropped. The profile is the path's (``model:profile``), else ``options.profile``.
    A ``model:profile`` path is a model of its own whose only profile is ``default``
    (the reference's profile variants), so ``options.profile`` may then name only that."""
    requested = options.get("profile")
    if requested is not None and (not isinstance(requested, str) or not requested.strip()):
        raise InvalidInput("Option 'profile' must be a non-empty string or null.")
    if path_profile is not None:
        if requested not in (None, "default"):
            raise InvalidInput(
                f"Unknown profile '{requested}'; '{spec.name}:{path_profile}' has only the 'default' profile."
            )
        chosen = path_profile
    else:
        chosen = requested or "default"
        if chosen != "default" and chosen not in spec.profiles:
            if not spec.profiles:
                raise InvalidInput(f"Unknown profile '{chosen}'; this model has only the 'default' profile.")
            names = ", ".join(["default", *spec.profiles])
            raise InvalidInput(f"Unknown profile '{chosen}'; model '{spec.name}' has the profiles {names}.")
    merged = {} if chosen == "default" else dict(spec.profiles[chosen].options)
    merged.update((key, value) for key, value in options.items() if key != "profile")
    return merged


def overflow_policy(options: Mapping[str, Any]) -> OverflowPolicy:
    value = options.get("overflow_policy", "default")
    if not isinstance(value, str) or value not in OVERFLOW_POLICIES:
        raise InvalidInput("Option 'overflow_policy' must be one of default, truncate_text, error.")
    return OVERFLOW_POLICIES[value]


async def lane_of(options: Mapping[str, Any], record: ModelRecord, *, wait: bool = False) -> str | None:
    """The engine lane of the request: the base model's, or its LoRA's (``options.lora``
    or ``options.lora_id``), loaded; see registry/loras.py."""
    lora = options.get("lora", options.get("lora_id"))
    if lora is None:
        return None
    if record.loras is None:
        raise InvalidInput(f"Model '{record.spec.name}' does not support LoRA adapters.")
    return await record.loras.lane(lora, wait=wait)


class Target(NamedTuple):
    """The model a request addresses, ready to serve it."""

    name: str
    path_profile: str | None
    record: ModelRecord
    engine: ModelEngine


def ready_for(registry: Registry, model: str, task: Task) -> Target:
    """Resolve the path's model (and profile), check that it has the task, and
    start loading it if cold (raises while it loads). The task is checked first:
    a request the model can never serve does not load it."""
    name, path_profile = registry.catalog.addressed(model)
    require_task(registry.record(name), task)
    record, engine = registry.ready_engine(name)
    return Target(name, path_profile, record, engine)


def result_id(item: Item, index: int) -> str:
    """Score and extract results name every item; missing ids become ``item-<index>``."""
    return item.id if item.id is not None else f"item-{index}"


def require_task(record: ModelRecord, task: Task) -> None:
    if task not in record.spec.tasks:
        raise TaskNotSupported(
            f"Model '{record.spec.name}' does not support {task}; it supports {', '.join(record.spec.tasks)}."
        )


def item_texts(
    items: Sequence[Item] | None,
    limits: Limits,
    *,
    field: str = "items",
    shared_bytes: int = 0,
    images: bool = False,
) -> list[str]:
    """The items' texts, checked against the per-item limit; ``shared_bytes`` is what
    the model reads with every item (instruction, query, labels) and counts too.
    ``images``: the model reads images, so an item with images needs no text."""
    if items is None:
        raise InvalidInput(f"Field '{field}' is required.")
    if not items:
        raise InvalidInput(f"Field '{field}' must not be empty.")
    if len(items) > limits.max_items:
        raise InvalidInput(
            f"The request has {len(items)} items; this server accepts at most {limits.max_items} per request. "
            f"Split the request into batches of {limits.max_items} or fewer."
        )
    return [
        item_text(item, index, limits, field=field, shared_bytes=shared_bytes, images=images)
        for index, item in enumerate(items)
    ]


# Text bytes checked between two turns of the event loop (a non-ASCII text is
# encoded to count its UTF-8 bytes: a few milliseconds per 2 MB).
CHECK_SLICE_BYTES = 1 << 20


async def item_texts_sliced(
    items: Sequence[Item] | None,
    limits: Limits,
    *,
    field: str = "items",
    shared_bytes: int = 0,
    images: bool = False,
) -> list[str]:
    """:func:`item_texts`, giving the event loop a turn after every
    ``CHECK_SLICE_BYTES`` of text, so that 16 items of 2 MB are not one step."""
    if items is None or not items or len(items) > limits.max_items:
        return item_texts(items, limits, field=field, shared_bytes=shared_bytes, images=images)
    texts: list[str] = []
    checked = 0
    for index, item in enumerate(items):
        text = item_text(item, index, limits, field=field, shared_bytes=shared_bytes, images=images)
        texts.append(text)
        checked += len(text)
        if checked >= CHECK_SLICE_BYTES:
            checked = 0
            await asyncio.sleep(0)
    return texts


def text_bytes(value: str, where: str) -> int:
    """UTF-8 size of a text; a lone surrogate (not encodable) is invalid input."""
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"{where}: the text contains a lone surrogate (invalid Unicode).") from None


def item_text(
    item: Item, index: int, limits: Limits, *, field: str = "items", shared_bytes: int = 0, images: bool = False
) -> str:
    text = item.text
    if text is None:
        if images and item.images:
            text = ""  # the item is encoded as its images
        elif item.images or item.audio or item.video or item.document:
            accepts = "text and images" if images else "text only"
            raise InvalidInput(f"{field}[{index}]: this model accepts {accepts}.")
        elif images:
            raise InvalidInput(f"{field}[{index}]: the item needs a 'text' or 'images'.")
        else:
            raise InvalidInput(f"{field}[{index}]: field 'text' is required.")
    size = text_bytes(text, f"{field}[{index}]")
    if item.metadata:
        size += len(msgspec.json.encode(item.metadata))
    if size + shared_bytes > limits.max_item_bytes:
        shared = f" plus {shared_bytes} bytes of instruction/query/labels read with it" if shared_bytes else ""
        raise InvalidInput(
            f"{field}[{index}]: text and metadata are {size} bytes{shared}; "
            f"the limit is {limits.max_item_bytes} bytes (UTF-8)."
        )
    return text


def shared_bytes(*values: str | None) -> int:
    """Bytes of the strings read with every item (instruction, query, labels)."""
    return sum(text_bytes(value, "instruction/labels") for value in values if value)


def char_cap(record: ModelRecord) -> int:
    """The most characters of one text that the record's model can read."""
    assert record.adapter is not None
    return max(1, record.adapter.info.max_sequence_length) * CHARS_PER_TOKEN_BOUND


def cap_text(text: str, cap: int, policy: OverflowPolicy, where: str) -> str:
    """Cut a text to ``cap`` characters before tokenizing. Under ``overflow_policy:
    error`` a text that long is over the model's limit whatever its tokens: 400."""
    if len(text) <= cap:
        return text
    if policy == "error":
        raise InputTooLong(
            f"{where} has {len(text)} characters, far more than the model reads "
            f"(at most {cap // CHARS_PER_TOKEN_BOUND} tokens); use overflow_policy 'truncate' to cut it."
        )
    return text[:cap]


def cap_texts(texts: Sequence[str], cap: int, policy: OverflowPolicy, field: str = "items") -> list[str]:
    return [cap_text(text, cap, policy, f"{field}[{index}]") for index, text in enumerate(texts)]


def string_option(options: Mapping[str, Any], key: str) -> str | None:
    value = options.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"Option '{key}' must be a string.")
    return value
