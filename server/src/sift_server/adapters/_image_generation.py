"""What the image extract adapters that generate text share (Florence-2, Donut, the
OCR vision-language models): the request checks (an image per item, no text-model
options), catalog counts, where one image's generated sequence ends inside a batch,
and the load/prepare/forward skeleton (``ImageGenerationAdapter``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from sift_server.adapters._torch_runtime import module_bytes, release_module
from sift_server.adapters.base import Adapter, AdapterInfo, ExtractTask, Part, Prepared, TaskInput
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

RequestT = TypeVar("RequestT")
ImageT = TypeVar("ImageT")


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


def split_by_parts(results: Sequence[Any], parts: Sequence[Part]) -> list[list[Any]]:
    """The batch's results (in the parts' order) cut back into one list per part."""
    out: list[list[Any]] = []
    offset = 0
    for part in parts:
        size = part.stop - part.start
        out.append(list(results[offset : offset + size]))
        offset += size
    return out


@dataclass(frozen=True, slots=True)
class GenerationBatch(Generic[RequestT, ImageT]):
    """One request's resolved settings and its images, each processed alone."""

    request: RequestT
    images: list[ImageT]


class ImageGenerationAdapter(Adapter, Generic[RequestT, ImageT]):
    """The skeleton of an adapter that answers each image with one ``generate`` of
    transformers' own model: ``prepare`` (the prep thread) resolves the request's
    settings and runs the processor per image; ``forward`` runs one ``generate`` over
    the images of every request in the batch with the same settings (the compat key),
    then reads each row alone. Subclasses say how (the abstract methods)."""

    # The compat key's tag, and the model's name in error messages.
    family: ClassVar[str]
    model_kind: ClassVar[str]

    def __init__(self, model: Any, processor: Any, *, device: torch.device) -> None:
        self.model = model
        self.processor = processor
        self.device = device
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("image",),
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @abc.abstractmethod
    def resolve(self, task: ExtractTask) -> RequestT:
        """The request's settings (hashable: it is the compat key), checked."""

    @abc.abstractmethod
    def prepare_image(self, image: Image, request: RequestT) -> ImageT:
        """One image through the processor, alone."""

    @abc.abstractmethod
    def image_cost(self, image: ImageT, request: RequestT) -> int:
        """The batch cost of one image: the tokens it reads and may write, per beam."""

    @abc.abstractmethod
    def generate(self, request: RequestT, images: list[ImageT]) -> list[list[int]]:
        """One ``generate`` over the images; each row as that image alone would end."""

    @abc.abstractmethod
    def answer(self, row: list[int], image: ImageT, request: RequestT) -> dict[str, Any]:
        """One image's generated row as the wire's extract item."""

    def prepare(self, task: TaskInput) -> Prepared:
        extract = only_images(task, self.model_kind)
        request = self.resolve(extract)
        images = [self.prepare_image(image, request) for image in first_images(extract)]
        return Prepared(
            item_costs=[self.image_cost(image, request) for image in images],
            compat_key=(self.family, request),
            payload=GenerationBatch(request, images),
        )

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        request: RequestT = parts[0].prepared.payload.request
        chosen: list[ImageT] = [
            image for part in parts for image in part.prepared.payload.images[part.start : part.stop]
        ]
        with torch.inference_mode():
            rows = self.generate(request, chosen)
        results = [self.answer(row, image, request) for row, image in zip(rows, chosen, strict=True)]
        return split_by_parts(results, parts)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
