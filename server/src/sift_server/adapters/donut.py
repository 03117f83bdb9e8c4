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

from collections.abc import Sequence
from dataclasses import dataclass
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
from sift_server.adapters._image_generation import catalog_count, first_images, only_images, sequence_through_eos
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class DonutBatch:
    request: DonutRequest
    prompt_ids: np.ndarray
    pixels: list[np.ndarray]


class DonutAdapter(Adapter):
    def __init__(
        self, model: Any, processor: Any, *, device: torch.device, task: str, max_new_tokens: int, num_beams: int
    ) -> None:
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.device = device
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.max_length = int(model.decoder.config.max_position_embeddings)
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("image",),
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

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

    def prepare(self, task: TaskInput) -> Prepared:
        task = only_images(task, "Donut")
        request = resolve_request(
            task.options,
            task.instruction,
            default_task=self.task,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )
        ids = np.asarray(self.tokenizer(request.prompt, add_special_tokens=False)["input_ids"], dtype=np.int64)
        if ids.shape[0] + request.max_new_tokens > self.max_length:
            raise InvalidInput(
                f"the prompt ({ids.shape[0]} tokens) and max_new_tokens ({request.max_new_tokens}) exceed "
                f"the decoder's {self.max_length} positions."
            )
        pixels = [
            np.asarray(self.processor(image, return_tensors="np")["pixel_values"][0], dtype=np.float32)
            for image in first_images(task)
        ]
        costs = [(int(ids.shape[0]) + request.max_new_tokens) * request.num_beams for _ in pixels]
        return Prepared(
            item_costs=costs,
            compat_key=("donut", request),
            payload=DonutBatch(request, ids, pixels),
        )

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        first: DonutBatch = parts[0].prepared.payload
        request = first.request
        pixels = [p for part in parts for p in part.prepared.payload.pixels[part.start : part.stop]]
        prompt = torch.from_numpy(np.stack([first.prompt_ids] * len(pixels))).to(self.device)
        with torch.inference_mode():
            generated = self.model.generate(
                torch.from_numpy(np.stack(pixels)).to(self.device),
                decoder_input_ids=prompt,
                max_length=self.max_length,
                max_new_tokens=request.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                use_cache=True,
                bad_words_ids=[[self.tokenizer.unk_token_id]],
                num_beams=request.num_beams,
            )
        results = []
        for row in generated.tolist():
            # Cut where this image alone would have stopped (the batch pads the rest).
            text = self.processor.decode(sequence_through_eos(row, int(self.tokenizer.eos_token_id)))
            sequence = clean_sequence(text, self.tokenizer.eos_token, self.tokenizer.pad_token)
            try:
                parsed = self.processor.token2json(sequence)
            except (ValueError, KeyError, AttributeError):
                parsed = fallback_json(sequence)
            results.append(extract_item(wire_entities(parsed, request.task)))
        out: list[list[Any]] = []
        offset = 0
        for part in parts:
            size = part.stop - part.start
            out.append(results[offset : offset + size])
            offset += size
        return out

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
