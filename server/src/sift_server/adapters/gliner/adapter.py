"""GLiNER zero-shot entity extraction through the ``gliner`` library.

``prepare`` builds exactly what the library will feed its encoder (label prompt
plus the text's words, split by the model's own word splitter) and tokenizes it
once, for the real token cost and for the length limit. When a text is too long
it is cut to a prefix that ends on a word boundary, so the library never
truncates on its own and every character offset it returns stays valid for the
caller's original text.

``forward`` runs every text of every part through ``GlinerBackend.inference``:
on PyTorch one ``GLiNER.inference`` call with ``batch_size`` equal to the number
of texts, so the fused batch is one encoder forward; on a runtime one such call
per group of texts of similar length (less padding).

The GLiNER it calls is PyTorch's or one whose graph runs on ONNX Runtime or
OpenVINO (``gliner/graph``): the entry's ``backend``; ``auto`` keeps a
runtime only when its spans on the probe set are PyTorch fp32's.
"""

from __future__ import annotations

import bisect
import copy
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sift_server.adapters._extract_common import (
    catalog_flag,
    catalog_threshold,
    extract_item,
    group_parts,
    reject_options,
    resolve_labels,
    text_extract_task,
)
from sift_server.adapters._probes import BATCH, GLINER_PROBE_LABELS, GLINER_PROBE_TEXTS
from sift_server.adapters._torch_runtime import configure_threads, select_device, tokenizer_limit
from sift_server.adapters.backends.select import may_run_torch, select
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    LoadContext,
    Part,
    Prepared,
    TaskInput,
)
from sift_server.adapters.gliner import graph as runtimes
from sift_server.errors import InputTooLong
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# --- GLiNER -----------------------------------------------------------------

# The library's own default for ``inference``.
DEFAULT_THRESHOLD = 0.5


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

    def __init__(
        self,
        backend: runtimes.GlinerBackend,
        options: Mapping[str, Any],
        max_tokens: int,
        runtime: Mapping[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        model = backend.model
        self.model = model
        # Catalog defaults, checked here so a bad entry fails its load.
        self.threshold = catalog_threshold(options, DEFAULT_THRESHOLD)
        self.flat_ner = catalog_flag(options, "flat_ner", True)
        self.multi_label = catalog_flag(options, "multi_label", False)
        processor = model.data_processor
        self._processor = processor
        # The library tokenizes in forward (executor thread) while prepare runs
        # on the event loop; a fast tokenizer's Rust state must not be shared
        # between concurrent calls, so prepare owns a copy.
        self._tokenizer: PreTrainedTokenizerBase = copy.deepcopy(processor.transformer_tokenizer)
        self._words_splitter = processor.words_splitter
        self.max_words = int(model.config.max_len)
        self.max_tokens = max_tokens
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("entities",),
            max_sequence_length=max_tokens,
            runtime=runtime or backend.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GlinerAdapter:
        # PyTorch threads matter on every backend: the library collates with torch.
        configure_threads(ctx.torch_threads)
        # The probe runs at the entry's own defaults: what its requests get unless they say otherwise.
        threshold = catalog_threshold(ctx.options, DEFAULT_THRESHOLD)
        flat_ner = catalog_flag(ctx.options, "flat_ner", True)
        multi_label = catalog_flag(ctx.options, "multi_label", False)
        device = str(select_device(ctx.options) if may_run_torch(ctx.backend) else "cpu")

        def evaluate(candidate: runtimes.GlinerBackend) -> runtimes.Spans:
            found = candidate.model.inference(
                list(GLINER_PROBE_TEXTS),
                list(GLINER_PROBE_LABELS),
                flat_ner=flat_ner,
                threshold=threshold,
                multi_label=multi_label,
                batch_size=BATCH,
            )
            return runtimes.spans(found)

        chosen, runtime = select(
            ctx,
            runtimes.GlinerGraph(ctx.path, device),
            evaluate,
            runtimes.SPANS,
            runtimes.open_gliner,
            device=device,
            supported=runtimes.SUPPORTED,
            probe_key=f"{runtimes.PROBE_VERSION}:{runtimes.gliner_version()}:{threshold}:{flat_ner}:{multi_label}",
            fp32_torch_only=True,
        )
        model = chosen.model
        tokenizer = model.data_processor.transformer_tokenizer
        encoder_config = getattr(model.config, "encoder_config", None)
        positions = getattr(encoder_config, "max_position_embeddings", None)
        return cls(chosen, ctx.options, tokenizer_limit(tokenizer, ctx.max_sequence_length, positions), runtime)

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(
            task,
            "an entity model",
            label_groups=task.label_groups,
            classification_type=task.classification_type,
            examples=task.examples,
        )
        labels = resolve_labels(task)
        threshold = task.threshold if task.threshold is not None else self.threshold
        assert threshold is not None
        flat_ner = task.flat_ner if task.flat_ner is not None else self.flat_ner
        multi_label = task.multi_label if task.multi_label is not None else self.multi_label

        prompt = self._prompt_words(labels)
        words = [list(self._words_splitter(text)) for text in task.texts]
        # One tokenizer call for the whole request, on exactly the library's input.
        encoded = self._tokenizer(
            [prompt + [w[0] for w in text_words] for text_words in words], is_split_into_words=True, verbose=False
        )
        texts: list[str] = []
        costs: list[int] = []
        for index, text in enumerate(task.texts):
            fitted, cost = self._fit(
                index,
                text,
                words[index],
                len(prompt),
                encoded["input_ids"][index],
                encoded.word_ids(index),
                error=task.overflow == "error",
            )
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
        return self.backend.memory_bytes()

    def close(self) -> None:
        self.backend.close()

    def _forward_group(self, parts: Sequence[Part]) -> list[list[dict[str, Any]]]:
        """One library call for parts that share labels and settings."""
        settings: GlinerPayload = parts[0].prepared.payload
        texts = [t for part in parts for t in part.prepared.payload.texts[part.start : part.stop]]
        lengths = [c for part in parts for c in part.prepared.item_costs[part.start : part.stop]]
        predictions = self.backend.inference(
            texts,
            lengths,
            settings.labels,
            flat_ner=settings.flat_ner,
            threshold=settings.threshold,
            multi_label=settings.multi_label,
        )
        items = [extract_item(entities=[_entity(e) for e in found]) for found in predictions]
        return split_by_parts(items, parts)

    def _prompt_words(self, labels: tuple[str, ...]) -> list[str]:
        """The label prompt exactly as the library prepends it to the words."""
        input_texts, _ = self._processor.prepare_inputs([[]], list(labels))
        return list(input_texts[0])

    def _fit(
        self,
        index: int,
        text: str,
        words: list[tuple[str, int, int]],
        n_prompt: int,
        input_ids: list[int],
        word_ids: list[int | None],
        *,
        error: bool,
    ) -> tuple[str, int]:
        """Return the text to run (whole, or a prefix ending on a word) and its token cost.

        ``words`` are the text's (word, start, end) from the model's splitter;
        ``input_ids``/``word_ids`` encode the label prompt (``n_prompt`` words)
        followed by those words."""
        n_tokens = len(input_ids)
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
        ends = _word_token_ends(word_ids, n_prompt + len(words))
        trailing = n_tokens - ends[-1]  # special tokens after the last word
        # Largest k with prompt + k words + trailing specials within the limit.
        budget = self.max_tokens - trailing
        fit = bisect.bisect_right(ends, budget, lo=n_prompt - 1) - n_prompt
        keep = min(len(words), self.max_words, fit)
        if keep <= 0:
            raise InputTooLong(
                f"item {index}: the label prompt alone takes the model's {self.max_tokens} tokens",
                index=index,
                max_tokens=self.max_tokens,
            )
        return text[: words[keep - 1][2]], ends[n_prompt + keep - 1] + trailing


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
