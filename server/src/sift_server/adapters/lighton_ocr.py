"""LightOnOCR-2 on transformers' own classes (``LightOnOcrForConditionalGeneration``,
``LightOnOcrProcessor``: a Pixtral vision encoder and a Qwen3 decoder): a page image
to Markdown, as the reference server's ``transformers`` profile answers it
(adapters/_lighton_ocr_rules.py; docs/models.md, "OCR vision-language models").

``prepare`` (the prep thread) renders the chat template (the catalog's system
prompt, the image, the request's instruction) and runs the processor's PIL image
path per image; ``forward`` runs one greedy (or beam) ``generate`` per page size
over the images of every request in the batch with the same settings: Pixtral reads
each page at its own resolution, and pages of one size batch with no padding, so
each answers exactly as it would alone. The new tokens are decoded without special
tokens and trimmed into one ``markdown`` entity.

LightOnOCR-3 (a Qwen3.5 checkpoint, sampled) is another architecture: a folder whose
config is not ``lighton_ocr`` is refused at load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._extract_common import extract_item
from sift_server.adapters._image_generation import ImageGenerationAdapter, catalog_count
from sift_server.adapters._lighton_ocr_rules import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_NUM_BEAMS,
    DEFAULT_SYSTEM_PROMPT,
    LightOnOcrRequest,
    chat_messages,
    resolve_request,
    through_end,
    wire_entities,
)
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import ExtractTask, LoadContext
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image


@dataclass(frozen=True, slots=True)
class LightOnOcrImage:
    """One item's processed page and prompt, and the size the processor read it at."""

    pixels: np.ndarray
    input_ids: np.ndarray
    image_size: tuple[int, int]


def refuse_other_architectures(folder: Path) -> None:
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    if config.get("model_type") != "lighton_ocr":
        raise UnservableModel(
            f"lighton_ocr cannot serve {folder}: its config.json is model_type {config.get('model_type')!r}, not "
            "'lighton_ocr' (LightOnOCR-2; LightOnOCR-3 is a Qwen3.5 checkpoint this adapter does not run)."
        )


def end_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a generation: the generation config's (one or a list), else the tokenizer's."""
    ends = model.generation_config.eos_token_id
    if ends is None:
        ends = tokenizer.eos_token_id
    return frozenset(int(end) for end in (ends if isinstance(ends, list | tuple) else [ends]))


class LightOnOcrAdapter(ImageGenerationAdapter[LightOnOcrRequest, LightOnOcrImage]):
    family = "lighton_ocr"
    model_kind = "LightOnOCR"

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        device: torch.device,
        system_prompt: str,
        max_new_tokens: int,
        num_beams: int,
    ) -> None:
        super().__init__(model, processor, device=device)
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.end_ids = end_token_ids(model, processor.tokenizer)
        self.pad_token_id = processor.tokenizer.pad_token_id
        self.max_positions = int(model.config.text_config.max_position_embeddings)

    @classmethod
    def load(cls, ctx: LoadContext) -> LightOnOcrAdapter:
        import torch
        from transformers import LightOnOcrForConditionalGeneration, LightOnOcrProcessor
        from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

        refuse_other_architectures(ctx.path)
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        system_prompt = ctx.options.get("system_prompt", DEFAULT_SYSTEM_PROMPT)
        if not isinstance(system_prompt, str) or not system_prompt.strip():
            raise ValueError(f"catalog option system_prompt must be a non-empty string, not {system_prompt!r}")
        max_new_tokens = catalog_count(ctx.options, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        num_beams = catalog_count(ctx.options, "num_beams", DEFAULT_NUM_BEAMS)
        # A bad catalog default fails the load, not every request.
        resolve_request({}, None, max_new_tokens=max_new_tokens, num_beams=num_beams)
        # The PIL image path (no torchvision), as the other image adapters.
        image_processor = PixtralImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = LightOnOcrProcessor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        model: Any = LightOnOcrForConditionalGeneration.from_pretrained(
            ctx.path, local_files_only=True, dtype=torch.float32
        )
        model.to(device).eval()
        return cls(
            model,
            processor,
            device=device,
            system_prompt=system_prompt,
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
        )

    def resolve(self, task: ExtractTask) -> LightOnOcrRequest:
        return resolve_request(
            task.options, task.instruction, max_new_tokens=self.max_new_tokens, num_beams=self.num_beams
        )

    def prepare_image(self, image: Image, request: LightOnOcrRequest) -> LightOnOcrImage:
        text = self.processor.apply_chat_template(
            chat_messages(self.system_prompt, request.instruction), add_generation_prompt=True, tokenize=False
        )
        inputs = self.processor(text=text, images=[image], return_tensors="np")
        input_ids = np.asarray(inputs["input_ids"][0], dtype=np.int64)
        if input_ids.shape[0] + request.max_new_tokens > self.max_positions:
            raise InvalidInput(
                f"the page's prompt ({input_ids.shape[0]} tokens) and max_new_tokens ({request.max_new_tokens}) "
                f"exceed the decoder's {self.max_positions} positions."
            )
        height, width = (int(side) for side in inputs["image_sizes"][0])
        return LightOnOcrImage(np.asarray(inputs["pixel_values"][0], dtype=np.float32), input_ids, (height, width))

    def image_cost(self, image: LightOnOcrImage, request: LightOnOcrRequest) -> int:
        return (int(image.input_ids.shape[0]) + request.max_new_tokens) * request.num_beams

    def generate(self, request: LightOnOcrRequest, images: list[LightOnOcrImage]) -> list[list[int]]:
        import torch

        # One generate per page size: same-size pages share a prompt length and a pixel
        # shape, so they batch with no padding and answer as each page alone.
        by_size: dict[tuple[int, int], list[int]] = {}
        for index, image in enumerate(images):
            by_size.setdefault(image.image_size, []).append(index)
        rows: list[list[int]] = [[] for _ in images]
        for size, indices in by_size.items():
            input_ids = torch.from_numpy(np.stack([images[i].input_ids for i in indices])).to(self.device)
            generated = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                pixel_values=torch.from_numpy(np.stack([images[i].pixels for i in indices])).to(self.device),
                image_sizes=torch.tensor([size] * len(indices), dtype=torch.int64, device=self.device),
                max_new_tokens=request.max_new_tokens,
                num_beams=request.num_beams,
                do_sample=False,
                pad_token_id=self.pad_token_id,
            )
            for i, row in zip(indices, generated[:, input_ids.shape[1] :].tolist(), strict=True):
                rows[i] = through_end(row, self.end_ids)
        return rows

    def answer(self, row: list[int], image: LightOnOcrImage, request: LightOnOcrRequest) -> dict[str, Any]:
        return extract_item(wire_entities(self.processor.decode(row, skip_special_tokens=True)))
