"""GLiNER2 through its library (PyPI ``gliner2``): entities, classification and
structured extraction, as the reference server's GLiNER2 adapter exposes them.

What a request asks for picks the task:

- ``params.output_schema`` (a JSON schema: an object of string, string-enum and
  array-of-string properties): structured extraction; ``data`` holds the one
  object the model read, ``{}`` when it found none.
- ``options.classification_task`` (or the catalog's): classification of each
  text against ``labels`` under that task name; ``classifications`` lists the
  labels over the threshold, best first (one in single-label mode, the default).
- otherwise entities for ``labels``: ``{text, label, score, start, end}`` in
  text order.

``threshold`` (default 0.5, the library's and the reference's) applies to all
three. The library builds a structured schema's prompt from a set of field
names, whose order changes from one process to the next (string hashing), so
the same request could be answered differently after a restart. Sift builds it
in the order of the schema's ``properties``: the library's processor module is
given an insertion-ordered set in place of the built-in one at load.

``forward`` makes one library call per group of fused requests that ask the
same (task, labels or schema, threshold, mode), with every text of the group in
one batch. A text whose tokens and prompt exceed ``max_sequence_length`` is cut
(or is a 400 ``INPUT_TOO_LONG`` with ``overflow_policy: error``); the reference
fails such an entity item and classifies a long text in windows instead.
``usage.input_tokens`` counts the texts' tokens, as the reference does.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sift_server.adapters._extract_common import (
    catalog_flag,
    catalog_threshold,
    extract_item,
    forward_by_key,
    reject_options,
    resolve_labels,
    text_extract_task,
)
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, ExtractTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput

DEFAULT_THRESHOLD = 0.5
DEFAULT_MAX_TOKENS = 512
# The structure name the schema's fields are read under (the reference's).
STRUCTURE = "_sie_root"
# Characters that split a gliner2 field spec ("name::[a|b]::str::description").
_DELIMITERS = ("::", "|", "[", "]")
# Prompt tokens per label beyond its own (gliner2 marks each one), and the prompt's own.
_TOKENS_PER_LABEL = 2
_PROMPT_OVERHEAD = 8
_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "description", "title"})
_FIELD_KEYS = frozenset({"type", "description", "enum", "items", "title"})


class OrderedSet:
    """The subset of ``set`` gliner2's processor uses, iterated in insertion order."""

    def __init__(self, values: Iterable[Hashable] = ()) -> None:
        self._items: dict[Hashable, None] = dict.fromkeys(values)

    def add(self, value: Hashable) -> None:
        self._items[value] = None

    def update(self, *values: Iterable[Hashable]) -> None:
        for more in values:
            self._items.update(dict.fromkeys(more))

    def __contains__(self, value: object) -> bool:
        return value in self._items

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def make_schema_order_deterministic() -> None:
    """Give gliner2's processor module an insertion-ordered ``set`` (see the module doc)."""
    import gliner2.processor

    gliner2.processor.set = OrderedSet  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Gliner2Payload:
    texts: list[str]
    kind: str  # "entities" | "classification" | "structure"
    labels: tuple[str, ...]
    fields: tuple[str, ...]
    task: str | None
    multi_label: bool
    threshold: float


def schema_fields(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """gliner2 field specs of a JSON schema, in ``properties`` order; 400 naming what is unsupported."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise InvalidInput("output_schema must be a JSON schema whose type is 'object'.")
    unsupported = sorted(set(schema) - _ROOT_KEYS)
    if unsupported:
        raise InvalidInput(f"output_schema: unsupported keywords {unsupported}.")
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        raise InvalidInput("output_schema needs a non-empty 'properties' object.")
    required = schema.get("required", [])
    if not isinstance(required, list) or any(name not in properties for name in required):
        raise InvalidInput("output_schema 'required' must list names of its properties.")
    fields = []
    for name, definition in properties.items():
        if not isinstance(name, str) or not name.strip() or any(d in name for d in _DELIMITERS):
            raise InvalidInput(f"output_schema property {name!r}: names may not be empty or hold :: | [ ].")
        if not isinstance(definition, Mapping) or set(definition) - _FIELD_KEYS:
            raise InvalidInput(
                f"output_schema property {name!r} must be an object of type, description, enum, items, title."
            )
        description = definition.get("description") or definition.get("title")
        if description is not None and not isinstance(description, str):
            raise InvalidInput(f"output_schema property {name!r}: description must be a string.")
        kind, enum = definition.get("type"), definition.get("enum")
        if enum is not None:
            if kind != "string" or not isinstance(enum, list) or not enum:
                raise InvalidInput(f"output_schema property {name!r}: enum needs type 'string' and a non-empty list.")
            if any(not isinstance(c, str) or not c or any(d in c for d in _DELIMITERS) for c in enum):
                raise InvalidInput(f"output_schema property {name!r}: enum values must be strings without :: | [ ].")
            spec = f"{name}::[{'|'.join(enum)}]::str"
        elif kind == "string":
            spec = f"{name}::str"
        elif kind == "array" and definition.get("items") == {"type": "string"}:
            spec = f"{name}::list"
        else:
            raise InvalidInput(f"output_schema property {name!r}: only string, string enum or array of strings.")
        if description:
            spec = f"{spec}::{description.replace('::', ':')}"
        fields.append(spec)
    return tuple(fields)


class Gliner2Adapter(Adapter):
    """Entities, classifications or structured data from one GLiNER2 model."""

    def __init__(self, model: Any, options: Mapping[str, Any], max_tokens: int, device: Any) -> None:
        self.model = model
        self.device = device
        self.threshold = catalog_threshold(options, DEFAULT_THRESHOLD) or 0.0
        self.multi_label = catalog_flag(options, "multi_label", False)
        task = options.get("classification_task")
        if task is not None and (not isinstance(task, str) or not task.strip()):
            raise ValueError(f"catalog option classification_task must be a non-empty string, not {task!r}")
        self.classification_task: str | None = task
        labels = options.get("default_labels")
        if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
            raise ValueError("catalog option default_labels must be a list of strings")
        self.default_labels = tuple(labels) if labels else ()
        self.max_tokens = max_tokens
        # prepare (event loop) owns its own copy of the fast tokenizer.
        self._tokenizer = copy.deepcopy(model.processor.tokenizer)
        self._specials = self._tokenizer.num_special_tokens_to_add()
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("entities", "classifications", "data"),
            max_sequence_length=max_tokens,
            runtime={"backend": "torch", "precision": "fp32", "selected_by": "adapter (PyTorch fp32 only)"},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> Gliner2Adapter:
        from gliner2 import GLiNER2

        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"gliner2 runs on PyTorch only, not backend {ctx.backend!r}")
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        make_schema_order_deterministic()
        model = GLiNER2.from_pretrained(str(ctx.path), map_location=str(device))
        model.eval()
        positions = getattr(model.encoder.config, "max_position_embeddings", None)
        limits = [x for x in (ctx.max_sequence_length, positions) if isinstance(x, int) and x > 0]
        return cls(model, ctx.options, min(limits) if limits else DEFAULT_MAX_TOKENS, device)

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(
            task, "a GLiNER2 model", flat_ner=task.flat_ner, label_groups=task.label_groups, examples=task.examples
        )
        threshold = task.threshold if task.threshold is not None else self.threshold
        if task.classification_type is not None:
            multi_label = task.classification_type == "multi-label"
        else:
            multi_label = task.multi_label if task.multi_label is not None else self.multi_label
        classification_task = task.options.get("classification_task", self.classification_task)
        labels: tuple[str, ...] = ()
        fields: tuple[str, ...] = ()
        if task.output_schema is not None:
            if task.labels:
                raise InvalidInput("Send either labels or output_schema, not both.")
            if "classification_task" in task.options:
                raise InvalidInput("Option 'classification_task' does not apply to structured extraction.")
            kind, fields, classification_task = "structure", schema_fields(task.output_schema), None
            prompt = list(fields)
        else:
            labels = tuple(label.strip() for label in task.labels) or self.default_labels
            labels = resolve_labels(ExtractTask(texts=task.texts, labels=labels))
            if classification_task is not None:
                if not isinstance(classification_task, str) or not classification_task.strip():
                    raise InvalidInput("Option 'classification_task' must be a non-empty string.")
                kind, prompt = "classification", [classification_task, *labels]
            else:
                kind, prompt = "entities", list(labels)
        prompt_tokens = self._prompt_tokens(prompt)
        texts, costs = [], []
        for index, text in enumerate(task.texts):
            text, tokens = self._fit(index, text, prompt_tokens, error=task.overflow == "error")
            texts.append(text)
            costs.append(tokens + prompt_tokens)
        payload = Gliner2Payload(texts, kind, labels, fields, classification_task, multi_label, threshold)
        # The library takes task, labels or schema, threshold and mode per call.
        key = ("gliner2", kind, labels, fields, classification_task, multi_label, threshold)
        # Usage counts each text with the tokenizer's specials, not the prompt (the reference's count).
        usage = sum(costs) - len(costs) * (prompt_tokens - self._specials)
        return Prepared(item_costs=costs, compat_key=key, payload=payload, input_tokens=usage)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        with torch.inference_mode():
            return forward_by_key(parts, self._run)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)

    def _run(self, payload: Gliner2Payload, texts: list[str]) -> list[dict[str, Any]]:
        common = {"batch_size": len(texts), "threshold": payload.threshold}
        if payload.kind == "structure":
            raw = self.model.batch_extract_json(
                texts, {STRUCTURE: list(payload.fields)}, include_confidence=False, include_spans=False, **common
            )
            return [extract_item() | {"data": _structure(result)} for result in raw]
        if payload.kind == "classification":
            assert payload.task is not None
            tasks = {
                payload.task: {
                    "labels": list(payload.labels),
                    "multi_label": payload.multi_label,
                    "cls_threshold": payload.threshold,
                }
            }
            raw = self.model.batch_classify_text(texts, tasks, include_confidence=True, **common)
            return [extract_item(classifications=_classes(r, payload.task, payload.threshold)) for r in raw]
        raw = self.model.batch_extract_entities(
            texts, list(payload.labels), include_confidence=True, include_spans=True, **common
        )
        return [extract_item(entities=_entities(r, text)) for r, text in zip(raw, texts, strict=True)]

    def _prompt_tokens(self, entries: list[str]) -> int:
        counts = self._tokenizer(entries, add_special_tokens=False, verbose=False)["input_ids"]
        tokens = sum(len(ids) for ids in counts) + _TOKENS_PER_LABEL * len(entries) + _PROMPT_OVERHEAD
        if tokens >= self.max_tokens:
            raise InvalidInput(f"The labels or schema take about {tokens} tokens; this model reads {self.max_tokens}.")
        return tokens

    def _fit(self, index: int, text: str, prompt_tokens: int, *, error: bool) -> tuple[str, int]:
        """The text (cut to what fits beside the prompt) and its tokens."""
        encoded = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        spans: list[tuple[int, int]] = encoded["offset_mapping"]
        room = self.max_tokens - prompt_tokens
        if len(spans) <= room:
            return text, len(spans)
        if error:
            raise InputTooLong(
                f"item {index}: {len(spans) + prompt_tokens} tokens with the labels, more than the model's "
                f"{self.max_tokens}",
                index=index,
                tokens=len(spans) + prompt_tokens,
                max_tokens=self.max_tokens,
            )
        return text[: spans[room - 1][1]], room


def _structure(result: Mapping[str, Any]) -> dict[str, Any]:
    values = result.get(STRUCTURE) or []
    if isinstance(values, list) and values and isinstance(values[0], dict):
        return dict(values[0])
    return {}


def _classes(result: Mapping[str, Any], task: str, threshold: float) -> list[dict[str, Any]]:
    found = result.get(task)
    candidates = [found] if isinstance(found, dict) else list(found or [])
    kept = [
        (str(c["label"]).strip(), float(c["confidence"]))
        for c in candidates
        if isinstance(c, dict) and "confidence" in c and float(c["confidence"]) >= threshold
    ]
    kept.sort(key=lambda pair: -pair[1])
    return [{"label": label, "score": score} for label, score in kept]


def _entities(result: Mapping[str, Any], text: str) -> list[dict[str, Any]]:
    found: list[tuple[int, int, str, float]] = []
    for label, spans in (result.get("entities") or {}).items():
        for span in spans:
            start, end = int(span["start"]), min(int(span["end"]), len(text))
            score = float(span.get("confidence", 0.0))
            # Past the text is only the "." gliner2 appends to a text without a sentence end.
            if 0 <= start < end and math.isfinite(score):
                found.append((start, end, str(label).strip(), score))
    found.sort(key=lambda entity: entity[0])  # stable: the library's order within a start
    return [
        {"text": text[start:end], "label": label, "score": score, "start": start, "end": end}
        for start, end, label, score in found
    ]
