"""Donut on transformers' own classes (``VisionEncoderDecoderModel``,
``DonutProcessor``): OCR-free document parsing (CORD), document questions (DocVQA)
and classification (RVL-CDIP) from a page image, as the reference server answers
them (adapters/_donut_rules.py; docs/models.md, "Florence-2 and Donut").

``prepare`` (the prep thread) runs the processor's PIL image path per image and
tokenizes the decoder prompt; ``forward`` runs one ``generate`` over the images of
every request in the batch that asks the same prompt and generation settings, then
the reference's clean-up and the processor's own ``token2json`` per image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._donut_rules import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_NUM_BEAMS,
    DEFAULT_TASK,
    DonutRequest,
    clean_sequence,
    fallback_json,
    resolve_request,
    wire_entities,
)
from sift_server.adapters._extract_common import extract_item
from sift_server.adapters._image_generation import ImageGenerationAdapter, catalog_count, sequence_through_eos
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import ExtractTask, LoadContext
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image


class DonutAdapter(ImageGenerationAdapter[DonutRequest, np.ndarray]):
    """Each prepared image is its processed pixels (the prompt is the request's)."""

    family = "donut"
    model_kind = "Donut"

    def __init__(
        self, model: Any, processor: Any, *, device: torch.device, task: str, max_new_tokens: int, num_beams: int
    ) -> None:
        super().__init__(model, processor, device=device)
        self.tokenizer = processor.tokenizer
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.max_length = int(model.decoder.config.max_position_embeddings)

    @classmethod
    def load(cls, ctx: LoadContext) -> DonutAdapter:
        import torch
        from transformers import DonutProcessor, VisionEncoderDecoderModel
        from transformers.models.donut.image_processing_pil_donut import DonutImageProcessorPil

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        task = ctx.options.get("task", DEFAULT_TASK)
        max_new_tokens = catalog_count(ctx.options, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        num_beams = catalog_count(ctx.options, "num_beams", DEFAULT_NUM_BEAMS)
        resolve_request({}, None, default_task=task, max_new_tokens=max_new_tokens, num_beams=num_beams)
        # The PIL image path (no torchvision), as the other image adapters.
        image_processor = DonutImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = DonutProcessor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        model: Any = VisionEncoderDecoderModel.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
        model.to(device).eval()
        return cls(model, processor, device=device, task=task, max_new_tokens=max_new_tokens, num_beams=num_beams)

    def resolve(self, task: ExtractTask) -> DonutRequest:
        request = resolve_request(
            task.options,
            task.instruction,
            default_task=self.task,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )
        prompt_length = len(self._prompt_ids(request))
        if prompt_length + request.max_new_tokens > self.max_length:
            raise InvalidInput(
                f"the prompt ({prompt_length} tokens) and max_new_tokens ({request.max_new_tokens}) exceed "
                f"the decoder's {self.max_length} positions."
            )
        return request

    def _prompt_ids(self, request: DonutRequest) -> list[int]:
        ids: list[int] = self.tokenizer(request.prompt, add_special_tokens=False)["input_ids"]
        return ids

    def prepare_image(self, image: Image, request: DonutRequest) -> np.ndarray:
        return np.asarray(self.processor(image, return_tensors="np")["pixel_values"][0], dtype=np.float32)

    def image_cost(self, image: np.ndarray, request: DonutRequest) -> int:
        return (len(self._prompt_ids(request)) + request.max_new_tokens) * request.num_beams

    def generate(self, request: DonutRequest, images: list[np.ndarray]) -> list[list[int]]:
        import torch

        prompt = torch.tensor([self._prompt_ids(request)] * len(images), dtype=torch.int64).to(self.device)
        generated = self.model.generate(
            torch.from_numpy(np.stack(images)).to(self.device),
            decoder_input_ids=prompt,
            max_length=self.max_length,
            max_new_tokens=request.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            use_cache=True,
            bad_words_ids=[[self.tokenizer.unk_token_id]],
            num_beams=request.num_beams,
        )
        # Cut where each image alone would have stopped (the batch pads the rest).
        return [sequence_through_eos(row, int(self.tokenizer.eos_token_id)) for row in generated.tolist()]

    def answer(self, row: list[int], image: np.ndarray, request: DonutRequest) -> dict[str, Any]:
        sequence = clean_sequence(self.processor.decode(row), self.tokenizer.eos_token, self.tokenizer.pad_token)
        try:
            parsed = self.processor.token2json(sequence)
        except (ValueError, KeyError, AttributeError):
            parsed = fallback_json(sequence)
        return extract_item(wire_entities(parsed, request.task))
