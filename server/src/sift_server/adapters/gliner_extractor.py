"""GLiNER zero-shot entity extraction through the ``gliner`` library.

``prepare`` builds exactly what the library will feed its encoder (label prompt
plus the text's words, split by the model's own word splitter) and tokenizes it
once, for the real token cost and for the length limit. When a text is too long
it is cut to a prefix that ends on a word boundary, so the library never
truncates on its own and every character offset it returns stays valid for the
caller's original text.

``forward`` runs one ``GLiNER.inference`` call over every text of every part,
with ``batch_size`` equal to the number of texts, so the fused batch is one
encoder forward.

This module also holds the small helpers shared by the extract adapters
(label/threshold resolution, the per-item output shape).
"""

from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sift_server.adapters._torch_runtime import configure_threads, module_bytes
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

DEFAULT_THRESHOLD = 0.5
# Tokenizers without a real limit report a huge sentinel model_max_length.
_UNBOUNDED = 1_000_000


# --- helpers shared by the extract adapters ---------------------------------


def resolve_labels(task: ExtractTask) -> tuple[str, ...]:
    """The request's labels, de-duplicated in order; at least one is required."""
    labels = list(task.labels or ())
    if not labels:
        raise InvalidInput("this model needs labels: pass params.labels")
    for label in labels:
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput("labels must be non-empty strings")
    return tuple(dict.fromkeys(labels))


def resolve_threshold(task: ExtractTask, defaults: Mapping[str, Any]) -> float:
    """Request field, then request options, then the catalog options, then 0.5."""
    value = task.threshold
    if value is None:
        value = task.options.get("threshold", defaults.get("threshold", DEFAULT_THRESHOLD))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput("threshold must be a number between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise InvalidInput("threshold must be a number between 0 and 1")
    return float(value)


def resolve_flag(
    name: str, field_value: bool | None, task: ExtractTask, defaults: Mapping[str, Any], fallback: bool
) -> bool:
    """A boolean setting: request field, request options, catalog options, fallback."""
    value: object = field_value
    if value is None:
        value = task.options.get(name, defaults.get(name, fallback))
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false")
    return value


def extract_item(
    entities: list[dict[str, Any]] | None = None,
    classifications: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One extract result in the wire shape (API.md §4.2), lists always present."""
    return {
        "entities": entities or [],
        "relations": [],
        "classifications": classifications or [],
        "objects": [],
        "data": {},
    }


def group_parts(parts: Sequence[Part]) -> dict[Hashable, list[int]]:
    """Indices of parts per compat key. The engine only fuses equal keys; grouping
    anyway keeps a forward correct (one library call per key) if it ever did not."""
    groups: dict[Hashable, list[int]] = {}
    for index, part in enumerate(parts):
        groups.setdefault(part.prepared.compat_key, []).append(index)
    return groups


def select_device(options: Mapping[str, Any]) -> torch.device:
    """The catalog's ``device`` option, else the GPU when there is one."""
    name = options.get("device")
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(str(name))


def tokenizer_limit(tokenizer: PreTrainedTokenizerBase, *others: int | None) -> int:
    """The smallest positive limit among the tokenizer's and ``others``."""
    limits = [int(x) for x in others if x]
    if 0 < tokenizer.model_max_length < _UNBOUNDED:
        limits.append(int(tokenizer.model_max_length))
    return min(limits) if limits else 512


# --- GLiNER -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlinerPayload:
    """What ``forward`` needs of one request: texts (maybe cut) and its settings."""

    texts: list[str]
    labels: tuple[str, ...]
    threshold: float
    flat_ner: bool
    multi_label: bool


class GlinerAdapter(Adapter):
    """Entities for a request's labels, with character offsets into each text."""

    def __init__(self, model: Any, options: Mapping[str, Any], max_tokens: int) -> None:
        self.model = model
        self.options = dict(options)
        processor = model.data_processor
        self._processor = processor
        # The library tokenizes in forward (executor thread) while prepare runs
        # on the event loop; a fast tokenizer's Rust state must not be shared
        # between concurrent calls, so prepare owns a copy.
        self._tokenizer: PreTrainedTokenizerBase = copy.deepcopy(processor.transformer_tokenizer)
        self._words_splitter = processor.words_splitter
        self.max_words = int(model.config.max_len)
        self.max_tokens = max_tokens
        self.device = model.device
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("entities",),
            max_sequence_length=max_tokens,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GlinerAdapter:
        from gliner import GLiNER

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model = GLiNER.from_pretrained(str(ctx.path), local_files_only=True, map_location=str(device))
        model.eval()
        tokenizer = model.data_processor.transformer_tokenizer
        encoder_config = getattr(model.config, "encoder_config", None)
        positions = getattr(encoder_config, "max_position_embeddings", None)
        return cls(model, ctx.options, tokenizer_limit(tokenizer, ctx.max_sequence_length, positions))

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ExtractTask):
            raise InvalidInput("this model only supports the extract task")
        if not task.texts:
            raise InvalidInput("extract needs at least one item")
        labels = resolve_labels(task)
        threshold = resolve_threshold(task, self.options)
        flat_ner = resolve_flag("flat_ner", None, task, self.options, True)
        multi_label = resolve_flag("multi_label", task.multi_label, task, self.options, False)

        prompt = self._prompt_words(labels)
        texts: list[str] = []
        costs: list[int] = []
        for index, text in enumerate(task.texts):
            fitted, cost = self._fit(index, text, prompt, error=task.overflow == "error")
            texts.append(fitted)
            costs.append(cost)
        payload = GlinerPayload(texts, labels, threshold, flat_ner, multi_label)
        key = ("gliner", labels, threshold, flat_ner, multi_label)
        return Prepared(item_costs=costs, compat_key=key, payload=payload, input_tokens=sum(costs))

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
        """One library call for parts that share labels and settings."""
        settings: GlinerPayload = parts[0].prepared.payload
        texts = [t for part in parts for t in part.prepared.payload.texts[part.start : part.stop]]
        predictions = self.model.inference(
            texts,
            list(settings.labels),
            flat_ner=settings.flat_ner,
            threshold=settings.threshold,
            multi_label=settings.multi_label,
            batch_size=len(texts),  # the whole fused batch in one encoder forward
        )
        items = [extract_item(entities=[_entity(e) for e in found]) for found in predictions]
        out: list[list[dict[str, Any]]] = []
        start = 0
        for part in parts:
            size = part.stop - part.start
            out.append(items[start : start + size])
            start += size
        return out

    def _prompt_words(self, labels: tuple[str, ...]) -> list[str]:
        """The label prompt exactly as the library prepends it to the words."""
        input_texts, _ = self._processor.prepare_inputs([[]], list(labels))
        return list(input_texts[0])

    def _fit(self, index: int, text: str, prompt: list[str], *, error: bool) -> tuple[str, int]:
        """Return the text to run (whole, or a prefix ending on a word) and its token cost."""
        words = list(self._words_splitter(text))
        encoded = self._tokenizer([prompt + [w[0] for w in words]], is_split_into_words=True, verbose=False)
        n_tokens = len(encoded["input_ids"][0])
        if n_tokens <= self.max_tokens and len(words) <= self.max_words:
            return text, n_tokens
        if error:
            raise InputTooLong(
                f"item {index}: {len(words)} words / {n_tokens} tokens with the label prompt; "
                f"the model takes at most {self.max_words} words and {self.max_tokens} tokens",
                index=index,
                tokens=n_tokens,
                max_tokens=self.max_tokens,
            )
        ends = _word_token_ends(encoded.word_ids(0), len(prompt) + len(words))
        trailing = n_tokens - ends[-1]  # special tokens after the last word
        # Largest k with prompt + k words + trailing specials within the limit.
        budget = self.max_tokens - trailing
        fit = bisect.bisect_right(ends, budget, lo=len(prompt) - 1) - len(prompt)
        keep = min(len(words), self.max_words, fit)
        if keep <= 0:
            raise InputTooLong(
                f"item {index}: the label prompt alone takes the model's {self.max_tokens} tokens",
                index=index,
                max_tokens=self.max_tokens,
            )
        return text[: words[keep - 1][2]], ends[len(prompt) + keep - 1] + trailing


def _word_token_ends(word_ids: Iterable[int | None], n_words: int) -> list[int]:
    """For each word, the index just past its last token (non-decreasing, so a
    word that produced no tokens inherits its predecessor's end)."""
    ends = [0] * n_words
    for position, word in enumerate(word_ids):
        if word is not None:
            ends[word] = position + 1
    for w in range(1, n_words):
        ends[w] = max(ends[w], ends[w - 1])
    return ends


def _entity(found: Mapping[str, Any]) -> dict[str, Any]:
    """The library's entity dict in the wire shape, with native python types."""
    return {
        "text": str(found["text"]),
        "label": str(found["label"]),
        "score": float(found["score"]),
        "start": int(found["start"]),
        "end": int(found["end"]),
        "bbox": None,
    }
