"""Qwen3-VL-Embedding: text, images or both to one dense vector, as the reference
server's ``qwen3_vl_embedding`` adapter makes it.

An item is a chat: a system turn holding the instruction, a user turn holding the item's
images, then its text (an empty text where it has neither), and the assistant turn's
opening (the folder's chat template). The instruction is the request's, else the entry's
``default_instruction`` (the reference's "Represent the user's input."), stripped and
given a final period unless it ends in punctuation (Qwen's ``format_model_input``); it
applies to queries and documents alike. The vector is the decoder's final (normed)
hidden state at the last token (``pooling: last``; ``mean``: the mean over the tokens),
L2-normalised unless the entry sets ``normalize: false``.

The reference runs one item per forward; Sift pads the fused batch on the left, so
concurrent requests share one forward and every item's answer does not depend on what
shares it (the parity tests check both). PyTorch fp32 only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sift_server.adapters._qwen3_vl import (
    Encoder,
    Row,
    check_folder,
    load_model,
    load_processor,
    part_inputs,
    prepared,
)
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

ADAPTER = "qwen3-vl-embedder"
DEFAULT_INSTRUCTION = "Represent the user's input."
DEFAULT_MAX_LENGTH = 32768
POOLINGS = ("last", "mean")


def normalize_instruction(instruction: str) -> str:
    """Stripped, with a final period unless it ends in punctuation (empty stays empty)."""
    text = instruction.strip()
    if text and not unicodedata.category(text[-1]).startswith("P"):
        text += "."
    return text


def conversation(instruction: str, text: str, images: Sequence[Image]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "image", "image": image} for image in images]
    if text:
        content.append({"type": "text", "text": text})
    if not content:
        content.append({"type": "text", "text": ""})
    return [
        {"role": "system", "content": [{"type": "text", "text": instruction}]},
        {"role": "user", "content": content},
    ]


class Qwen3VLEmbedderAdapter(Adapter):
    def __init__(
        self,
        model: Any,
        encoder: Encoder,
        *,
        device: torch.device,
        normalize: bool,
        pooling: str,
        max_length: int,
        default_instruction: str,
    ) -> None:
        self.model = model
        self.encoder = encoder
        self.device = device
        self.normalize = normalize
        self.pooling = pooling
        self.max_length = max_length
        self.default_instruction = default_instruction
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            inputs=("text", "image"),
            outputs=("dense",),
            dims={"dense": int(model.config.text_config.hidden_size)},
            max_sequence_length=max_length,
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> Qwen3VLEmbedderAdapter:
        check_folder(ctx.path, ADAPTER)
        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"{ADAPTER} runs on PyTorch only, not {ctx.backend!r}")
        pooling = str(ctx.options.get("pooling", "last"))
        if pooling not in POOLINGS:
            raise ValueError(f"{ADAPTER}: pooling must be one of {POOLINGS}, not {pooling!r}")
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        processor = load_processor(ctx.path, ctx.path)
        return cls(
            load_model(ctx.path, device),
            Encoder(processor),
            device=device,
            normalize=bool(ctx.options.get("normalize", True)),
            pooling=pooling,
            max_length=int(ctx.max_sequence_length or DEFAULT_MAX_LENGTH),
            default_instruction=str(ctx.options.get("default_instruction") or DEFAULT_INSTRUCTION),
        )

    # ---- prepare (event loop, or the prep thread for images) ------------

    def _row(self, instruction: str, text: str, images: Sequence[Image], index: int, overflow: str) -> Row:
        row = self.encoder.row(self.encoder.prompt(conversation(instruction, text, images)), images)
        if len(row.ids) <= self.max_length:
            return row
        if overflow == "error" or images:
            cut = "" if images else " (use overflow_policy 'truncate' to cut it)"
            raise InputTooLong(
                f"item {index}: {len(row.ids)} tokens with the prompt"
                f"{' and its images' if images else ''}; this model takes at most {self.max_length}{cut}",
                index=index,
                tokens=len(row.ids),
                max_tokens=self.max_length,
            )
        # What the reference's processor call does with truncation on: keep the first tokens.
        return Row(row.ids[: self.max_length])

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, EncodeTask):
            raise InvalidInput("This model only supports the encode task.")
        instruction = normalize_instruction(task.instruction or "") or normalize_instruction(self.default_instruction)
        rows = [
            self._row(instruction, text, task.images[index] if task.images else (), index, task.overflow)
            for index, text in enumerate(task.texts)
        ]
        return prepared(ADAPTER, rows)

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        inputs = part_inputs(parts, self.encoder, self.device)
        with torch.inference_mode():
            # The base model's output is after the final norm (the CausalLM's hidden states are not).
            hidden = self.model.model(**inputs, use_cache=False, return_dict=True).last_hidden_state
            if self.pooling == "last":
                vectors = hidden[:, -1]
            else:
                mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vectors = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if self.normalize:
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=-1)
            dense = vectors.float().cpu().numpy()
        return split_by_parts([{"dense": dense[i]} for i in range(len(dense))], parts)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
