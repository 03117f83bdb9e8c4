"""Florence-2 on transformers' own classes (``Florence2ForConditionalGeneration``,
``Florence2Processor``): captions, OCR, OCR with regions and object detection from
an image, the task chosen by ``options.task`` as the reference server maps it
(adapters/_florence2_rules.py; docs/models.md, "Florence-2 and Donut").

These classes read the converted checkpoints (``florence-community/Florence-2-*``).
A folder in Microsoft's repository-code layout (``microsoft/Florence-2-*``: an
``auto_map`` to its own ``modeling_florence2.py``, a tokenizer without the image
token) is refused at load, naming the converted checkpoint to use.

``prepare`` (the prep thread) runs the processor's PIL image path and prompt
per image; ``forward`` runs one ``generate`` over the images of every request in
the batch that asks the same prompt and generation settings (beam search too),
then the processor's own ``post_process_generation`` per image, with the size
the image was sent at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._extract_common import extract_item
from sift_server.adapters._florence2_rules import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_NUM_BEAMS,
    DEFAULT_TASK,
    Florence2Request,
    resolve_request,
    wire_answer,
)
from sift_server.adapters._image_generation import ImageGenerationAdapter, catalog_count, sequence_through_eos
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import ExtractTask, LoadContext

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

CONVERTED = "florence-community/Florence-2-base-ft"


@dataclass(frozen=True, slots=True)
class Florence2Image:
    """One item's processed image and prompt, and the size it was sent at."""

    pixels: np.ndarray
    input_ids: np.ndarray
    width: int
    height: int


def refuse_repository_layout(folder: Path) -> None:
    """Refuse a folder the native classes cannot read (Microsoft's repository-code layout)."""
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    if config.get("auto_map") or any(folder.glob("*florence2*.py")):
        raise UnservableModel(
            f"florence2 cannot serve {folder}: it is Florence-2 in Microsoft's repository-code layout "
            "(config.json's auto_map names its own modeling_florence2.py, which only trust_remote_code runs, "
            "and its BART tokenizer lacks the image token transformers' Florence2Processor needs). Sift serves "
            "Florence-2 with transformers' own classes: use the converted checkpoint of the same model, "
            f"e.g. {CONVERTED} (docs/models.md, 'Florence-2 and Donut')."
        )
    if config.get("model_type") != "florence2":
        raise UnservableModel(
            f"florence2 cannot serve {folder}: its config.json is model_type {config.get('model_type')!r}, "
            "not 'florence2'."
        )


class Florence2Adapter(ImageGenerationAdapter[Florence2Request, Florence2Image]):
    family = "florence2"
    model_kind = "Florence-2"

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        device: torch.device,
        task: str,
        max_new_tokens: int,
        num_beams: int,
    ) -> None:
        super().__init__(model, processor, device=device)
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.eos_token_id = int(processor.tokenizer.eos_token_id)

    @classmethod
    def load(cls, ctx: LoadContext) -> Florence2Adapter:
        import torch
        from transformers import Florence2ForConditionalGeneration, Florence2Processor
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        refuse_repository_layout(ctx.path)
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        task = ctx.options.get("task", DEFAULT_TASK)
        max_new_tokens = catalog_count(ctx.options, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        num_beams = catalog_count(ctx.options, "num_beams", DEFAULT_NUM_BEAMS)
        # The PIL image path (no torchvision), as the other image adapters.
        image_processor = CLIPImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = Florence2Processor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        model: Any = Florence2ForConditionalGeneration.from_pretrained(
            ctx.path, local_files_only=True, dtype=torch.float32
        )
        model.to(device).eval()
        adapter = cls(model, processor, device=device, task=task, max_new_tokens=max_new_tokens, num_beams=num_beams)
        # A bad catalog task fails the load, not every request.
        resolve_request({}, None, default_task=task, max_new_tokens=max_new_tokens, num_beams=num_beams)
        return adapter

    def resolve(self, task: ExtractTask) -> Florence2Request:
        return resolve_request(
            task.options,
            task.instruction,
            default_task=self.task,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )

    def prepare_image(self, image: Image, request: Florence2Request) -> Florence2Image:
        inputs = self.processor(text=[request.prompt], images=[image], return_tensors="np")
        return Florence2Image(
            np.asarray(inputs["pixel_values"][0], dtype=np.float32),
            np.asarray(inputs["input_ids"][0], dtype=np.int64),
            image.width,
            image.height,
        )

    def image_cost(self, image: Florence2Image, request: Florence2Request) -> int:
        return (int(image.input_ids.shape[0]) + request.max_new_tokens) * request.num_beams

    def generate(self, request: Florence2Request, images: list[Florence2Image]) -> list[list[int]]:
        import torch

        generated = self.model.generate(
            input_ids=torch.from_numpy(np.stack([image.input_ids for image in images])).to(self.device),
            pixel_values=torch.from_numpy(np.stack([image.pixels for image in images])).to(self.device),
            max_new_tokens=request.max_new_tokens,
            num_beams=request.num_beams,
            do_sample=False,
        )
        # Cut where each image alone would have stopped (the batch pads the rest).
        return [sequence_through_eos(row, self.eos_token_id) for row in generated.tolist()]

    def answer(self, row: list[int], image: Florence2Image, request: Florence2Request) -> dict[str, Any]:
        text = self.processor.decode(row, skip_special_tokens=False)
        parsed = self.processor.post_process_generation(text, task=request.task, image_size=(image.width, image.height))
        entities, objects = wire_answer(parsed, request.task)
        return extract_item(entities) | {"objects": objects}
