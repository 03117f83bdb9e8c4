"""GLiClass zero-shot text classification through the ``gliclass`` library.

The request's labels are the candidate classes; results go to each item's
``classifications`` as ``{label, score}`` sorted by score, highest first.
Single-label mode returns only the best class (softmax scores, as the library
computes them); multi-label mode returns every class at or over the threshold
(sigmoid scores).

``prepare`` renders the exact string the library's pipeline will tokenize
(text, label markers, optional task prompt) to get the real token cost. If it
is too long, the *text* is cut, never the label section: the pipeline would
otherwise truncate the end of the string, which drops labels on models that put
them after the text. ``forward`` runs one pipeline call over every text of every
part with ``batch_size`` equal to the number of texts (one encoder forward).

Threshold, single/multi-label and the instruction (the pipeline's per-text
``prompt``) are per text in the library, so only the label set decides which
requests may fuse: requests that differ in those settings still share a forward.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sift_server.adapters._extract_common import (
    extract_item,
    group_parts,
    resolve_flag,
    resolve_labels,
    resolve_threshold,
)
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, select_device, tokenizer_limit
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    ExtractTask,
    LoadContext,
    Part,
    Prepared,
    TaskInput,
)
from sift_server.errors import InputTooLong, InvalidInput

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Architectures whose pipeline renders one string per text via ``prepare_input``.
_RENDERED = frozenset({"uni-encoder", "bi-encoder-fused", "decoder-kv"})


@dataclass(frozen=True, slots=True)
class GliClassPayload:
    """What ``forward`` needs of one request."""

    texts: list[str]
    labels: tuple[str, ...]
    threshold: float
    multi_label: bool
    prompt: str


class GliClassAdapter(Adapter):
    """Classifies each text against the request's labels."""

    def __init__(
        self, pipeline: Any, tokenizer: PreTrainedTokenizerBase, options: Mapping[str, Any], max_tokens: int
    ) -> None:
        self.pipeline = pipeline
        self.model = pipeline.pipe.model
        self.options = dict(options)
        self.max_tokens = max_tokens
        # The pipeline tokenizes in forward (executor thread) while prepare runs
        # on the event loop: prepare owns a copy of the fast tokenizer.
        self._tokenizer: PreTrainedTokenizerBase = copy.deepcopy(tokenizer)
        self._architecture = str(self.model.config.architecture_type)
        self.device = self.model.device
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("classifications",),
            max_sequence_length=max_tokens,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GliClassAdapter:
        from gliclass import GLiClassModel, ZeroShotClassificationPipeline
        from transformers import AutoTokenizer

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model = GLiClassModel.from_pretrained(ctx.path, local_files_only=True)
        model.to(device)
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        encoder_config = model.config.encoder_config.get_text_config()
        positions = getattr(encoder_config, "max_position_embeddings", None)
        max_tokens = tokenizer_limit(tokenizer, ctx.max_sequence_length, positions)
        pipeline = ZeroShotClassificationPipeline(
            model,
            tokenizer,
            max_length=max_tokens,
            classification_type="multi-label",  # overridden per text in forward
            device=str(device),
            progress_bar=False,
        )
        return cls(pipeline, tokenizer, ctx.options, max_tokens)

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ExtractTask):
            raise InvalidInput("this model only supports the extract task")
        if not task.texts:
            raise InvalidInput("extract needs at least one item")
        labels = resolve_labels(task)
        threshold = resolve_threshold(task, self.options)
        # The library's pipeline defaults to multi-label; so do we.
        multi_label = resolve_flag("multi_label", task.multi_label, task, self.options, True)
        prompt = task.instruction or ""
        # One tokenizer call for the whole request, on exactly the pipeline's input.
        rendered = [self._render(text, labels, prompt) for text in task.texts]
        counts = [len(ids) for ids in self._tokenizer(rendered, verbose=False)["input_ids"]]
        texts: list[str] = []
        costs: list[int] = []
        for index, (text, n_tokens) in enumerate(zip(task.texts, counts, strict=True)):
            if n_tokens > self.max_tokens:
                text, n_tokens = self._fit(index, text, n_tokens, labels, prompt, error=task.overflow == "error")
            texts.append(text)
            costs.append(n_tokens)
        payload = GliClassPayload(texts, labels, threshold, multi_label, prompt)
        return Prepared(
            item_costs=costs,
            compat_key=("gliclass", labels),
            payload=payload,
            input_tokens=sum(costs),
        )

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        outputs: list[list[Any]] = [[] for _ in parts]
        for indices in group_parts(parts).values():
            group = [parts[i] for i in indices]
            for i, items in zip(indices, self._forward_group(group), strict=True):
                outputs[i] = items
        return outputs

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        # Drop the weights now rather than when the last reference goes away.
        self.model.to("meta")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _forward_group(self, parts: Sequence[Part]) -> list[list[dict[str, Any]]]:
        """One pipeline call for parts that share a label set; the other settings
        go to the pipeline per text."""
        labels = list(parts[0].prepared.payload.labels)
        texts: list[str] = []
        thresholds: list[float] = []
        modes: list[str] = []
        prompts: list[str] = []
        for part in parts:
            payload: GliClassPayload = part.prepared.payload
            for text in payload.texts[part.start : part.stop]:
                texts.append(text)
                thresholds.append(payload.threshold)
                modes.append("multi-label" if payload.multi_label else "single-label")
                prompts.append(payload.prompt)
        predictions = self.pipeline(
            texts,
            labels,
            threshold=thresholds,
            batch_size=len(texts),  # the whole fused batch in one encoder forward
            classification_type=modes,
            prompt=prompts if any(prompts) else None,
        )
        items = [extract_item(classifications=_classifications(found)) for found in predictions]
        out: list[list[dict[str, Any]]] = []
        start = 0
        for part in parts:
            size = part.stop - part.start
            out.append(items[start : start + size])
            start += size
        return out

    def _render(self, text: str, labels: tuple[str, ...], prompt: str) -> str:
        """The string the pipeline tokenizes for this text."""
        if self._architecture in _RENDERED:
            rendered: str = self.pipeline.pipe.prepare_input(text, list(labels), None, prompt or None)
            return rendered
        # Other architectures encode labels separately; the text side is this.
        return f"{prompt} {text}" if prompt else text

    def _count(self, value: str) -> int:
        return len(self._tokenizer(value, verbose=False)["input_ids"])

    def _fit(
        self, index: int, text: str, n_tokens: int, labels: tuple[str, ...], prompt: str, *, error: bool
    ) -> tuple[str, int]:
        """For a text whose rendered input takes ``n_tokens``, over the limit: raise,
        or return a token-aligned prefix that fits and its token cost."""
        if error:
            raise InputTooLong(
                f"item {index}: {n_tokens} tokens with the labels, more than the model's {self.max_tokens}",
                index=index,
                tokens=n_tokens,
                max_tokens=self.max_tokens,
            )
        encoded = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        spans: list[tuple[int, int]] = encoded["offset_mapping"]
        keep = self.max_tokens - (n_tokens - len(spans))  # minus labels, prompt, specials
        while keep > 0:
            fitted = text[: spans[keep - 1][1]]
            # Re-count: a cut text can tokenize differently at the boundary.
            n_tokens = self._count(self._render(fitted, labels, prompt))
            if n_tokens <= self.max_tokens:
                return fitted, n_tokens
            keep -= n_tokens - self.max_tokens
        raise InputTooLong(
            f"item {index}: the labels alone take the model's {self.max_tokens} tokens",
            index=index,
            max_tokens=self.max_tokens,
        )


def _classifications(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pipeline's predictions, highest score first (stable for ties)."""
    ranked = sorted(found, key=lambda p: -float(p["score"]))
    return [{"label": str(p["label"]), "score": float(p["score"])} for p in ranked]
