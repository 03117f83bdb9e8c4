"""What the image extract adapters share: the request checks (an image per item,
no text-model options), catalog counts, and where one image's generated sequence
ends inside a batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sift_server.adapters.base import ExtractTask, TaskInput
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    from PIL.Image import Image


def only_images(task: TaskInput, model_kind: str) -> ExtractTask:
    """The extract task, refusing the options only text models read."""
    if not isinstance(task, ExtractTask):
        raise InvalidInput("This model only supports extract.")
    for name in ("output_schema", "label_groups"):
        if getattr(task, name):
            raise InvalidInput(f"Option '{name}' does not apply to {model_kind}.")
    return task


def first_images(task: ExtractTask) -> list[Image]:
    """Each item's first image (the one the reference reads); the service has
    refused items without one."""
    if len(task.images) != len(task.texts):
        raise InvalidInput("this model reads images: send each item with 'images'.")
    out = []
    for index, images in enumerate(task.images):
        if not images:
            raise InvalidInput(f"items[{index}]: this model reads images; the item has none.")
        out.append(images[0])
    return out


def catalog_count(options: Mapping[str, Any], name: str, default: int) -> int:
    """A positive integer catalog option (checked at load: a bad one fails the load)."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"catalog option {name} must be a positive integer, not {value!r}")
    return value


def sequence_through_eos(row: Sequence[int], eos_token_id: int) -> list[int]:
    """A generated row up to its first end token after the start (included): what
    generating that image alone returns; a batch pads the rows that end sooner."""
    for index in range(1, len(row)):
        if row[index] == eos_token_id:
            return list(row[: index + 1])
    return list(row)
