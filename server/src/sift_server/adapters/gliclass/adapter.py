"""GLiClass zero-shot text classification through the ``gliclass`` library.

The request's labels are the candidate classes; results go to each item's
``classifications`` as ``{label, score}``: every label whose score passes the
threshold (default 0, so all of them), highest first, in both modes.
Single-label mode scores with a softmax over the labels, multi-label mode with
a sigmoid per label, exactly as the library does. ``options.label_groups``
scores each group as if its labels were the request's labels; classifications
then read ``group.label`` and ``data`` holds one summary per group (API.md §4).

``prepare`` renders the exact string the library's pipeline will tokenize
(label markers, task prompt, text, few-shot examples) for the real token cost.
If it is too long, the *text* is cut, never the label section: the pipeline
would otherwise truncate the end of the string, which drops labels or examples.
``forward`` runs one pipeline call over every (text, label set) row of every
part with ``batch_size`` equal to the number of rows (one encoder forward).

Mode, threshold, instruction (the pipeline's ``prompt``) and examples are per
row in the library, so only the label sets decide which requests may fuse.
``usage.input_tokens`` counts the documents (plus instruction and examples),
not the label prompts; the batch cost still counts every rendered token.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._extract_common import (
    catalog_flag,
    catalog_threshold,
    extract_item,
    group_parts,
    reject_options,
    resolve_labels,
    text_extract_task,
)
from sift_server.adapters._probes import GLICLASS_PROBE_LABELS, PROBE_TEXTS
from sift_server.adapters._torch_runtime import configure_threads, select_device, tokenizer_limit
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.request import REFERENCE
from sift_server.adapters.backends.runners import TorchRunner
from sift_server.adapters.backends.seam import PrepareOnly, Runner
from sift_server.adapters.backends.select import select
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    LoadContext,
    Part,
    Prepared,
    TaskInput,
)
from sift_server.adapters.gliclass import graph as runtimes
from sift_server.errors import InputTooLong

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Architectures whose pipeline renders one string per text via ``prepare_input``.
_RENDERED = frozenset({"uni-encoder", "bi-encoder-fused", "decoder-kv"})
# Multi-label group data lists labels at or over this when the request sets no threshold.
GROUP_DATA_THRESHOLD = 0.5

# One scored label set: the group name (None for plain ``labels``) and its labels.
Row = tuple[str | None, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class GliClassPayload:
    """What ``forward`` needs of one request."""

    texts: list[str]
    rows: tuple[Row, ...]
    threshold: float
    data_threshold: float
    single_label: bool
    prompt: str
    examples: list[dict[str, Any]] | None


class GliClassAdapter(Adapter):
    """Classifies each text against the request's labels (or each of its label groups)."""

    loads_prepare_only = True

    def __init__(
        self,
        pipeline: Any,
        backend: Runner,
        tokenizer: PreTrainedTokenizerBase,
        options: Mapping[str, Any],
        max_tokens: int,
        runtime: dict[str, Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.backend = backend
        self.model = pipeline.pipe.model
        # Catalog defaults, checked here so a bad entry fails its load. The
        # reference lists every label by default (threshold 0).
        self.threshold = catalog_threshold(options, None)
        self.single_label = _catalog_single_label(options)
        self.max_tokens = max_tokens
        # The pipeline tokenizes in forward (executor thread) while prepare runs
        # on the event loop: prepare owns a copy of the fast tokenizer.
        self._tokenizer: PreTrainedTokenizerBase = copy.deepcopy(tokenizer)
        # Counting goes straight to the copy's Rust tokenizer: the same ids as
        # calling the transformers tokenizer untruncated, without its per-call
        # Python (a good part of a short request's prepare).
        self._counter = _rust_counter(self._tokenizer)
        # Token counts of instruction and examples strings, which repeat across requests.
        self._extra_counts: dict[str, int] = {}
        self._architecture = str(self.model.config.architecture_type)
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("classifications",),
            max_sequence_length=max_tokens,
            runtime=runtime or backend.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GliClassAdapter:
        from gliclass import GLiClassModelConfig, ZeroShotClassificationPipeline
        from transformers import AutoTokenizer

        from sift_server.adapters.gliclass.export import prunable

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        config = GLiClassModelConfig.from_pretrained(ctx.path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        positions = getattr(config.encoder_config.get_text_config(), "max_position_embeddings", None)
        max_tokens = tokenizer_limit(tokenizer, ctx.max_sequence_length, positions)
        graph = runtimes.GliClassGraph(
            ctx.path, tokenizer.model_input_names, prune_last_layer=prunable(config, tokenizer.model_input_names)
        )
        # The pipeline renders and tokenizes for every backend; what it calls for
        # logits is set once the backend is chosen.
        stand_in = runtimes.RunnerModel(config, graph.token_inputs)
        pipeline = ZeroShotClassificationPipeline(
            stand_in,
            tokenizer,
            max_length=max_tokens,
            classification_type="multi-label",  # overridden per text in forward
            device="cpu",
            progress_bar=False,
        )
        if ctx.prepare_only:
            stand_in.runner = PrepareOnly()
            return cls(pipeline, stand_in.runner, tokenizer, ctx.options, max_tokens)
        single_label = _catalog_single_label(ctx.options)
        labels = list(GLICLASS_PROBE_LABELS)
        probe = pipeline.pipe.prepare_inputs(list(PROBE_TEXTS), labels, same_labels=True)

        def evaluate(runner: Runner) -> np.ndarray:
            logits = runtimes.served_logits(
                runner, runtimes.feed(probe, graph.token_inputs, len(labels)), graph.token_inputs
            )
            return runtimes.probabilities(logits, len(labels), single_label)

        exported = runtimes.exportable(config) and device.type == "cpu"
        runner, runtime = select(
            ctx,
            graph,
            evaluate,
            runtimes.RANKS,
            open_runner,
            device=str(device),
            supported=runtimes.SUPPORTED if exported else {REFERENCE},
            probe_key=f"{runtimes.PROBE_VERSION}:{runtimes.gliclass_version()}:{single_label}:{max_tokens}",
            fp32_torch_only=True,
        )
        if isinstance(runner, TorchRunner):
            pipeline.pipe.model = runner.base_model()
            pipeline.pipe.device = runner.device
        else:
            stand_in.runner = runner
        return cls(pipeline, runner, tokenizer, ctx.options, max_tokens, runtime)

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(task, "a classification model", flat_ner=task.flat_ner)
        rows: tuple[Row, ...] = (
            tuple((name, labels) for name, labels in task.label_groups)
            if task.label_groups is not None
            else ((None, resolve_labels(task)),)
        )
        if task.classification_type is not None:
            single_label = task.classification_type == "single-label"
        elif task.multi_label is not None:
            single_label = not task.multi_label
        else:
            single_label = self.single_label
        request_threshold = task.threshold if task.threshold is not None else self.threshold
        prompt = task.instruction or ""
        examples = [{"text": e.text, "labels": list(e.labels)} for e in task.examples] or None
        texts: list[str] = []
        costs: list[int] = []
        for index, text in enumerate(task.texts):
            text, n_tokens = self._fit_rows(index, text, rows, prompt, examples, error=task.overflow == "error")
            texts.append(text)
            costs.append(n_tokens)
        payload = GliClassPayload(
            texts=texts,
            rows=rows,
            threshold=request_threshold if request_threshold is not None else 0.0,
            data_threshold=request_threshold if request_threshold is not None else GROUP_DATA_THRESHOLD,
            single_label=single_label,
            prompt=prompt,
            examples=examples,
        )
        return Prepared(
            item_costs=costs,
            # Mode, threshold, prompt and examples go to the pipeline per text:
            # only the label sets decide which requests share a forward.
            compat_key=("gliclass", rows),
            payload=payload,
            input_tokens=self._document_tokens(texts, prompt, examples),
        )

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
        """One pipeline call over every (text, label set) row of the parts; the
        pipeline takes labels, mode, prompt and examples per row and returns every
        label's score (``return_hierarchical``), which we threshold and sort."""
        row_texts: list[str] = []
        row_labels: list[list[str]] = []
        modes: list[str] = []
        prompts: list[str] = []
        row_examples: list[list[dict[str, Any]] | None] = []
        for part in parts:
            payload: GliClassPayload = part.prepared.payload
            for text in payload.texts[part.start : part.stop]:
                for _, labels in payload.rows:
                    row_texts.append(text)
                    row_labels.append(list(labels))
                    modes.append("single-label" if payload.single_label else "multi-label")
                    prompts.append(payload.prompt)
                    row_examples.append(payload.examples)
        scores: list[dict[str, float]] = self.pipeline(
            row_texts,
            row_labels,
            threshold=0.0,
            batch_size=len(row_texts),  # the whole fused batch in one encoder forward
            classification_type=modes,
            prompt=prompts if any(prompts) else None,
            examples=row_examples if any(row_examples) else None,
            return_hierarchical=True,
        )
        out: list[list[dict[str, Any]]] = []
        row = 0
        for part in parts:
            payload = part.prepared.payload
            items = []
            for _ in range(part.start, part.stop):
                per_row = scores[row : row + len(payload.rows)]
                row += len(payload.rows)
                items.append(_item(payload, per_row))
            out.append(items)
        return out

    def _render(
        self, text: str, labels: Sequence[str], prompt: str, examples: list[dict[str, Any]] | None = None
    ) -> str:
        """The string the pipeline tokenizes for this text and label set."""
        if self._architecture in _RENDERED:
            rendered: str = self.pipeline.pipe.prepare_input(text, list(labels), examples, prompt or None)
            return rendered
        # Other architectures encode labels separately; the text side is this.
        shots = examples_prompt(self.pipeline.pipe, examples) if examples else ""
        return (f"{prompt} {text}" if prompt else text) + shots

    def _document_tokens(self, texts: list[str], prompt: str, examples: list[dict[str, Any]] | None) -> int:
        """Usage: the documents' tokens plus instruction and examples per item, not the label prompts."""
        extra = 0
        if prompt:
            extra += self._extra_count(prompt)
        if examples:
            extra += self._extra_count(examples_prompt(self.pipeline.pipe, examples))
        return sum(self._counts(texts, special=False)) + extra * len(texts)

    def _counts(self, values: list[str], *, special: bool = True) -> list[int]:
        """Each string's token count, untruncated (``special``: with the special tokens)."""
        if self._counter is not None:
            return [len(e.ids) for e in self._counter.encode_batch_fast(values, add_special_tokens=special)]
        encoded = self._tokenizer(values, add_special_tokens=special, verbose=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def _extra_count(self, value: str) -> int:
        count = self._extra_counts.get(value)
        if count is None:
            if len(self._extra_counts) >= _EXTRA_COUNTS_KEPT:
                self._extra_counts.clear()
            count = self._extra_counts[value] = self._counts([value], special=False)[0]
        return count

    def _fit_rows(
        self,
        index: int,
        text: str,
        rows: tuple[Row, ...],
        prompt: str,
        examples: list[dict[str, Any]] | None,
        *,
        error: bool,
    ) -> tuple[str, int]:
        """The text (cut to fit its largest row if needed) and its cost: the
        tokens of every row's rendered input."""
        rendered = [self._render(text, labels, prompt, examples) for _, labels in rows]
        counts = self._counts(rendered)
        worst = max(range(len(rows)), key=counts.__getitem__)
        if counts[worst] <= self.max_tokens:
            return text, sum(counts)
        text = self._fit(index, text, counts[worst], rows[worst][1], prompt, examples, error=error)
        rendered = [self._render(text, labels, prompt, examples) for _, labels in rows]
        return text, sum(self._counts(rendered))

    def _count(self, value: str) -> int:
        return self._counts([value])[0]

    def _fit(
        self,
        index: int,
        text: str,
        n_tokens: int,
        labels: Sequence[str],
        prompt: str,
        examples: list[dict[str, Any]] | None,
        *,
        error: bool,
    ) -> str:
        """For a text whose rendered input takes ``n_tokens``, over the limit: raise,
        or return a token-aligned prefix that fits."""
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
            n_tokens = self._count(self._render(fitted, labels, prompt, examples))
            if n_tokens <= self.max_tokens:
                return fitted
            keep -= n_tokens - self.max_tokens
        raise InputTooLong(
            f"item {index}: the labels alone take the model's {self.max_tokens} tokens",
            index=index,
            max_tokens=self.max_tokens,
        )


# Distinct instruction and examples strings whose counts are kept (then forgotten at once).
_EXTRA_COUNTS_KEPT = 256


def examples_prompt(pipe: Any, examples: list[dict[str, Any]]) -> str:
    """Few-shot examples as the pipeline writes them into a text's input.

    The pipeline's own method for this is private (``_format_examples_for_input``);
    it passes the pipeline's example and separator tokens to the module's public
    ``format_examples_prompt``, which is what is called here, with the same tokens."""
    from gliclass.pipeline import format_examples_prompt

    prompt: str = format_examples_prompt(examples, example_token=pipe.example_token, sep_token=pipe.sep_token)
    return prompt


def _rust_counter(tokenizer: PreTrainedTokenizerBase) -> Any:
    """The ``tokenizers.Tokenizer`` inside a fast tokenizer, set to neither pad nor
    truncate (as the transformers call without those options sets it); None for a
    slow tokenizer."""
    rust = getattr(tokenizer, "backend_tokenizer", None)
    if rust is None:
        return None
    rust.no_truncation()
    rust.no_padding()
    return rust


def _catalog_single_label(options: Mapping[str, Any]) -> bool:
    """The catalog's mode: ``classification_type``, else ``multi_label``, else multi-label
    (the library's default)."""
    kind = options.get("classification_type")
    if kind is not None:
        if kind not in ("single-label", "multi-label"):
            raise ValueError(f"catalog option classification_type must be single-label or multi-label, not {kind!r}")
        return bool(kind == "single-label")
    return not catalog_flag(options, "multi_label", True)


def _item(payload: GliClassPayload, per_row: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """One item's classifications (every label over the threshold, best first;
    ``group.label`` for groups) and, for groups, its per-group ``data``."""
    found: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for (group, labels), scores in zip(payload.rows, per_row, strict=True):
        probabilities = {label: float(scores[label]) for label in labels}
        for label, score in probabilities.items():
            if score >= payload.threshold:
                found.append({"label": f"{group}.{label}" if group is not None else label, "score": score})
        if group is not None:
            data[group] = _group_data(probabilities, payload)
    found.sort(key=lambda c: -c["score"])  # stable: ties keep label order
    item = extract_item(classifications=found)
    item["data"] = data
    return item


def _group_data(probabilities: dict[str, float], payload: GliClassPayload) -> dict[str, Any]:
    if payload.single_label:
        choice = max(probabilities, key=probabilities.__getitem__)
        k = len(probabilities)
        entropy = -sum(p * math.log(p) for p in probabilities.values() if p > 0.0)
        confidence = 1.0 - entropy / math.log(k) if k > 1 else 1.0
        return {"type": "choice", "choice": choice, "probabilities": probabilities, "confidence": confidence}
    chosen = [label for label, p in probabilities.items() if p >= payload.data_threshold]
    return {"labels": chosen, "probabilities": probabilities}
