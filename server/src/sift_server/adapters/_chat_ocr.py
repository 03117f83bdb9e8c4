"""What the OCR vision-language adapters share (LightOnOCR-2, PaddleOCR-VL, GLM-OCR,
MinerU2.5): the catalog settings and checked weights at load; at serving, a page image
and a chat prompt through the processor, one greedy (or beam) ``generate`` per group of
same-shaped pages, the new tokens decoded without special tokens and trimmed into one
entity (adapters/_ocr_vl_rules.py).

These models read each page at its own resolution, so a page's prompt length and
pixel shape follow its size: pages whose processor outputs have the same shapes (and
image grids) batch with no padding, each answering exactly as it would alone; pages
of other sizes run in their own ``generate`` within the same forward.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from sift_server.adapters._extract_common import extract_item
from sift_server.adapters._image_generation import ImageGenerationAdapter, catalog_count
from sift_server.adapters._ocr_vl_rules import ChatOcrRequest, through_end, wire_entities
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import LoadContext
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

# Processor outputs whose values (not only shapes) must match for pages to share a generate.
_GRID_KEYS = ("image_sizes", "image_grid_thw")


@dataclass(frozen=True, slots=True)
class ChatOcrPage:
    """One page's processor outputs (each with its batch axis of 1) and the key of
    the pages it can share a ``generate`` with."""

    inputs: dict[str, np.ndarray]
    group: tuple[Any, ...]

    @property
    def prompt_length(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


def model_type_of(folder: Path) -> Any:
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    return config.get("model_type")


def refuse_model_type(folder: Path, adapter: str, want: str, hint: str) -> None:
    """Refuse a folder whose config is another architecture."""
    found = model_type_of(folder)
    if found != want:
        raise UnservableModel(
            f"{adapter} cannot serve {folder}: its config.json is model_type {found!r}, not {want!r} ({hint})."
        )


@dataclass(frozen=True, slots=True)
class ChatOcrSettings:
    """What every chat-OCR adapter reads from its catalog entry before its weights."""

    device: torch.device
    max_new_tokens: int
    num_beams: int


def catalog_settings(
    ctx: LoadContext, *, adapter: str, model_type: str, hint: str, max_new_tokens: int
) -> ChatOcrSettings:
    """Refuse another architecture, set the threads, and read the device and the counts
    (a bad count fails the load, not every request)."""
    refuse_model_type(ctx.path, adapter, model_type, hint)
    configure_threads(ctx.torch_threads)
    return ChatOcrSettings(
        device=select_device(ctx.options),
        max_new_tokens=catalog_count(ctx.options, "max_new_tokens", max_new_tokens),
        num_beams=catalog_count(ctx.options, "num_beams", 1),
    )


def load_checked(model_class: Any, folder: Path, adapter: str) -> Any:
    """The model at fp32, refused if any weight of the class is missing from the folder
    or of another shape (transformers would fill it at random and answer nonsense)."""
    import torch

    try:
        model, info = model_class.from_pretrained(
            folder, local_files_only=True, dtype=torch.float32, output_loading_info=True
        )
    except RuntimeError as error:
        if "mismatched" not in str(error):
            raise
        # transformers refuses a weight of another shape itself, before the check below sees it.
        raise UnservableModel(f"{adapter} cannot serve {folder}: {error}") from error
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(key) for key in info.get("mismatched_keys") or [])
    if missing or mismatched:
        raise UnservableModel(
            f"{adapter} cannot serve {folder}: {model_class.__name__} finds weights missing ({missing[:5]}) "
            f"or of another shape ({mismatched[:5]}) in its checkpoint."
        )
    return model


def end_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a generation: the generation config's (one or a list), else the tokenizer's."""
    ends = model.generation_config.eos_token_id
    if ends is None:
        ends = tokenizer.eos_token_id
    return frozenset(int(end) for end in (ends if isinstance(ends, list | tuple) else [ends]))


class ChatOcrAdapter(ImageGenerationAdapter[ChatOcrRequest, ChatOcrPage]):
    def __init__(
        self, model: Any, processor: Any, *, device: torch.device, max_new_tokens: int, num_beams: int
    ) -> None:
        super().__init__(model, processor, device=device)
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.end_ids = end_token_ids(model, processor.tokenizer)
        pad = processor.tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else min(self.end_ids)
        self.max_positions = int(model.config.text_config.max_position_embeddings)

    @classmethod
    def assemble(
        cls, ctx: LoadContext, settings: ChatOcrSettings, model_class: Any, processor: Any, adapter: str
    ) -> Self:
        """The adapter over the folder's checked weights (fp32, on the settings' device)."""
        model = load_checked(model_class, ctx.path, adapter)
        model.to(settings.device).eval()
        return cls(
            model,
            processor,
            device=settings.device,
            max_new_tokens=settings.max_new_tokens,
            num_beams=settings.num_beams,
        )

    @abc.abstractmethod
    def messages(self, request: ChatOcrRequest) -> list[dict[str, Any]]:
        """The chat the reference builds for one page (the image as a placeholder)."""

    def generate_options(self) -> dict[str, Any]:
        """The model's own ``generate`` settings beyond the request's (none by default)."""
        return {}

    def prepare_image(self, image: Image, request: ChatOcrRequest) -> ChatOcrPage:
        text = self.processor.apply_chat_template(self.messages(request), add_generation_prompt=True, tokenize=False)
        try:
            processed = self.processor(text=text, images=[image], return_tensors="np")
        except ValueError as exc:
            # The image processors refuse what they cannot resize (an aspect ratio past 200:1).
            raise InvalidInput(f"this model cannot read the image ({image.width} x {image.height}): {exc}") from exc
        inputs = {name: np.asarray(value) for name, value in processed.items()}
        length = int(inputs["input_ids"].shape[1])
        if length + request.max_new_tokens > self.max_positions:
            raise InvalidInput(
                f"the page's prompt ({length} tokens) and max_new_tokens ({request.max_new_tokens}) "
                f"exceed the decoder's {self.max_positions} positions."
            )
        shapes = tuple(sorted((name, value.shape) for name, value in inputs.items()))
        grids = tuple(tuple(inputs[name].ravel().tolist()) for name in _GRID_KEYS if name in inputs)
        return ChatOcrPage(inputs, (shapes, grids))

    def image_cost(self, image: ChatOcrPage, request: ChatOcrRequest) -> int:
        return (image.prompt_length + request.max_new_tokens) * request.num_beams

    def generate(self, request: ChatOcrRequest, images: list[ChatOcrPage]) -> list[list[int]]:
        import torch

        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, page in enumerate(images):
            groups.setdefault(page.group, []).append(index)
        rows: list[list[int]] = [[] for _ in images]
        for indices in groups.values():
            first = images[indices[0]]
            batch = {
                name: torch.from_numpy(np.concatenate([images[i].inputs[name] for i in indices])).to(self.device)
                for name in first.inputs
            }
            generated = self.model.generate(
                **batch,
                max_new_tokens=request.max_new_tokens,
                num_beams=request.num_beams,
                do_sample=False,
                pad_token_id=self.pad_token_id,
                **self.generate_options(),
            )
            for i, row in zip(indices, generated[:, first.prompt_length :].tolist(), strict=True):
                rows[i] = through_end(row, self.end_ids)
        return rows

    def answer(self, row: list[int], image: ChatOcrPage, request: ChatOcrRequest) -> dict[str, Any]:
        return extract_item(wire_entities(self.processor.decode(row, skip_special_tokens=True), request.label))
