"""Qwen3-VL-Reranker: the relevance of a text query to a candidate that is a text, an
image, or both, as the reference server's ``qwen3_vl_reranker`` adapter scores it:
``sigmoid(logit(yes) - logit(no))`` at the last token of the model's judging chat.

The chat (the folder's chat template): a system turn asking for "yes" or "no", a user
turn ``<Instruct>: {instruction}``, ``<Query>:``, the query, ``\\n<Document>:``, the
candidate's image, then its text, and the assistant turn's opening. The instruction is the
request's, else the entry's ``default_instruction`` (the reference's "Retrieve relevant
documents for the query."). A prompt past the limit (the entry's ``max_sequence_length``,
or a smaller ``options.max_seq_length``) loses the candidate text's last tokens, as the
reference trims it; the instruction, query, template and image are kept whole.

Pairs are independent: concurrent requests share one forward, padded on the left, so
the last position is every row's last token. PyTorch fp32 only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
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
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, ScoreTask, TaskInput
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

ADAPTER = "qwen3-vl-reranker"
DEFAULT_INSTRUCTION = "Retrieve relevant documents for the query."
DEFAULT_MAX_LENGTH = 32768
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
# The placeholder the processor expands image tokens through (reserved in user text too).
_PLACEHOLDER = "<|placeholder|>"


def conversation(instruction: str, query: str, document: str, image: Image | None) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "<Instruct>: " + instruction},
        {"type": "text", "text": "<Query>:"},
        {"type": "text", "text": query},
        {"type": "text", "text": "\n<Document>:"},
    ]
    if image is not None:
        content.append({"type": "image", "image": image})
    if document:
        content.append({"type": "text", "text": document})
    return [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "user", "content": content},
    ]


def _token_id(tokenizer: Any, token: str) -> int:
    """The id of ``token`` as one vocabulary entry (refused where it is not one)."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id or tokenizer.convert_ids_to_tokens(token_id) != token:
        raise UnservableModel(f"the tokenizer has no {token!r} token, which the reranker's answer is read from")
    return int(token_id)


class Qwen3VLRerankerAdapter(Adapter):
    def __init__(
        self,
        model: Any,
        encoder: Encoder,
        *,
        device: torch.device,
        max_length: int,
        default_instruction: str,
    ) -> None:
        self.model = model
        self.encoder = encoder
        self.device = device
        self.max_length = max_length
        self.default_instruction = default_instruction
        processor = encoder.processor
        tokenizer = processor.tokenizer
        self.yes_id = _token_id(tokenizer, "yes")
        self.no_id = _token_id(tokenizer, "no")
        self.image_token = str(processor.image_token)
        _token_id(tokenizer, self.image_token)
        self.merge = int(processor.image_processor.merge_size) ** 2
        reserved = {str(token) for token in tokenizer.all_special_tokens if token}
        for name in ("image_token", "video_token", "vision_start_token", "vision_end_token"):
            if getattr(processor, name, None):
                reserved.add(str(getattr(processor, name)))
        self.reserved = frozenset(reserved | {_PLACEHOLDER})
        self.info = AdapterInfo(
            tasks=frozenset({"score"}),
            inputs=("text", "image"),
            outputs=("score",),
            max_sequence_length=max_length,
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> Qwen3VLRerankerAdapter:
        check_folder(ctx.path, ADAPTER)
        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"{ADAPTER} runs on PyTorch only, not {ctx.backend!r}")
        # The image processor may come from the base model's folder (the reference falls
        # back to Qwen3-VL-2B-Instruct's where the reranker's has none); the tokenizer and
        # chat template are the reranker's own.
        processor_folder = Path(str(ctx.options.get("processor") or ctx.path))
        if not processor_folder.is_absolute():
            processor_folder = ctx.path / processor_folder
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        processor = load_processor(processor_folder, ctx.path)
        return cls(
            load_model(ctx.path, device),
            Encoder(processor),
            device=device,
            max_length=int(ctx.max_sequence_length or DEFAULT_MAX_LENGTH),
            default_instruction=str(ctx.options.get("default_instruction") or DEFAULT_INSTRUCTION),
        )

    # ---- prepare (event loop, or the prep thread for images) ------------

    def _limit(self, options: Mapping[str, Any]) -> int:
        value = options.get("max_seq_length")
        if value is None:
            return self.max_length
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput("options.max_seq_length must be a positive integer")
        return min(value, self.max_length)

    def _expanded(self, prompt: str, grids: Sequence[tuple[int, int, int]]) -> str:
        """The prompt with each image token repeated as the processor repeats it."""
        for t, h, w in grids:
            prompt = prompt.replace(self.image_token, _PLACEHOLDER * (t * h * w // self.merge), 1)
        return prompt.replace(_PLACEHOLDER, self.image_token)

    def _pair(
        self, instruction: str, query: str, text: str, images: Sequence[Image], index: int, overflow: str, limit: int
    ) -> Row:
        if len(images) > 1:
            raise InvalidInput(f"item {index}: this model takes at most one image per candidate")
        if not text.strip() and not images:
            raise InvalidInput(f"item {index}: a candidate needs a nonblank text or an image")
        if any(token in text for token in self.reserved):
            raise InvalidInput(f"item {index}: the text holds one of the model's reserved control tokens")
        image = images[0] if images else None
        prompt = self.encoder.prompt(conversation(instruction, query, text, image))
        row = self.encoder.row(prompt, [image] if image is not None else [])
        if len(row.ids) <= limit:
            return row
        if overflow == "error":
            raise InputTooLong(
                f"item {index}: the prompt takes {len(row.ids)} tokens; this model takes at most {limit} "
                "(use overflow_policy 'truncate' to cut the candidate's text)",
                index=index,
                tokens=len(row.ids),
                max_tokens=limit,
            )
        inside = self._document_tokens(row, instruction, query, text, image)
        protected = len(row.ids) - len(inside)
        if protected > limit:
            raise InputTooLong(
                f"item {index}: the instruction, query, template{' and image' if image is not None else ''} "
                f"take {protected} tokens, more than the model's {limit}",
                index=index,
            )
        drop = set(inside[limit - protected :])
        return Row([token for i, token in enumerate(row.ids) if i not in drop], row.pixels, row.grids)

    def _document_tokens(self, row: Row, instruction: str, query: str, document: str, image: Image | None) -> list[int]:
        """Where the candidate's text is in the row: the tokens whose characters lie
        wholly inside it (found through a sentinel in its place, as the reference does)."""
        sentinel = "DOCUMENT_TEXT_SENTINEL"
        while sentinel in "\n".join((instruction, query, document)):
            sentinel += "_X"
        prompt = self.encoder.prompt(conversation(instruction, query, document, image))
        marked = self.encoder.prompt(conversation(instruction, query, sentinel, image))
        prefix, suffix = self._expanded(marked, row.grids).split(sentinel, 1)
        expanded = self._expanded(prompt, row.grids)
        if expanded != prefix + document + suffix:
            raise RuntimeError("the chat template changed the prompt outside the candidate text")
        offsets = self.encoder.offsets(expanded)
        if len(offsets) != len(row.ids):
            raise RuntimeError("the tokenizer's offsets do not line up with the processor's tokens")
        start, end = len(prefix), len(prefix) + len(document)
        return [i for i, (a, b) in enumerate(offsets) if start <= a < b <= end]

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ScoreTask):
            raise InvalidInput("This model only supports the score task.")
        if not task.texts:
            raise InvalidInput("score needs at least one item")
        if not task.query.strip():
            raise InvalidInput("the query needs a nonblank text")
        instruction = task.instruction or self.default_instruction
        if any(token in value for value in (instruction, task.query) for token in self.reserved):
            raise InvalidInput("the query and instruction must not hold the model's reserved control tokens")
        limit = self._limit(task.options)
        rows = [
            self._pair(
                instruction, task.query, text, task.images[index] if task.images else (), index, task.overflow, limit
            )
            for index, text in enumerate(task.texts)
        ]
        return prepared(ADAPTER, rows)

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        inputs = part_inputs(parts, self.encoder, self.device)
        with torch.inference_mode():
            logits = self.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
            scores = torch.sigmoid(logits[:, self.yes_id].float() - logits[:, self.no_id].float())
        return split_by_parts([float(s) for s in scores.cpu().tolist()], parts)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
