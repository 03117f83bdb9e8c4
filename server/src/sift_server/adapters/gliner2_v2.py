"""GLiNER2 2.x entity models (gliner2.5, the GLiNER2 privacy filter) through ``gliner2`` 2.0.0.

The reference server serves these checkpoints with ``gliner2==2.0.0`` in its
own bundle, and so must Sift: the 2.x release answers the v1 models
(``fastino/gliner2-base-v1``, ``-large-v1``, adapter ``gliner2``) differently
(structured extraction is rescored, repeated mentions all come back), so Sift's
environment keeps 1.3.2 for those, and 2.0.0 lives in a side folder that only a
child process imports (``adapters/gliner2_v2_child.py``; ``scripts/bootstrap.sh``
installs it, ``--no-deps``, into ``<venv>/sift-side/gliner2-2.0.0``).

A request's ``labels`` name the entity types (exact, unique, non-blank);
``options.threshold`` (default 0.5, the reference's) keeps spans scoring that
much. An answer lists ``{text, label, score, start, end}`` in text order (the
library's order within a start) and, as the reference does, the encoded row's
token counts in ``data`` (``encoded_row_token_count``, ``schema_prompt_token_count``).
As in the reference, nothing is cut or windowed: a text whose row (labels and
text) would pass ``max_sequence_length`` is a 400 ``INPUT_TOO_LONG`` before any
model work, whatever ``overflow_policy`` says. A span the library reports on the
"." it appends to a text without a sentence end is cut back to the text (the
reference fails that item instead).

``forward`` sends one call per group of fused requests with the same labels and
threshold to the child and waits on its pipe without the GIL; a call past
``timeout_s`` (catalog option, default 600 s) kills the child, and the next call
starts a fresh one.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sift_server.adapters._extract_common import (
    catalog_threshold,
    extract_item,
    forward_by_key,
    reject_options,
    text_extract_task,
)
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.adapters.conversion_process import ConversionCrashed, ConversionProcess, ConversionTimeout
from sift_server.adapters.gliner2_v2_child import GLINER2_V2_VERSION
from sift_server.errors import InputTooLong, InvalidInput

DEFAULT_THRESHOLD = 0.5
DEFAULT_MAX_TOKENS = 4096  # the reference catalog's rows for these checkpoints
DEFAULT_MAX_PROMPT_TOKENS = 2048
DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 300.0
MAX_LABEL_CHARS = 128
# Prompt tokens per label beyond its own (gliner2 marks each one), and the row's own markers.
_TOKENS_PER_LABEL = 2
_ROW_OVERHEAD = 8
# Strings of gliner2's prompt a label may not hold (they would change the prompt's structure).
_MARKERS = ("[P]", "[C]", "[E]", "[R]", "[L]", "[SEP_STRUCT]", "[SEP_TEXT]", "[DESCRIPTION]", "[EXAMPLE]")
_SENTENCE_END = (".", "!", "?")


def side_path() -> Path:
    """Where ``scripts/bootstrap.sh`` installs gliner2 2.0.0 beside Sift's own 1.3.2."""
    return Path(sys.prefix) / "sift-side" / f"gliner2-{GLINER2_V2_VERSION}"


@dataclass(frozen=True, slots=True)
class EntitiesPayload:
    texts: list[str]
    labels: tuple[str, ...]
    threshold: float


class Gliner2V2Adapter(Adapter):
    """Entities from a GLiNER2 2.x checkpoint, run by ``gliner2`` 2.0.0 in a child process."""

    def __init__(self, path: Path, tokenizer: Any, options: Mapping[str, Any], max_tokens: int, threads: int) -> None:
        self.path = path
        self.threshold = catalog_threshold(options, DEFAULT_THRESHOLD) or 0.0
        self.max_prompt_tokens = _positive_int(options, "max_prompt_tokens", DEFAULT_MAX_PROMPT_TOKENS)
        timeout = options.get("timeout_s", DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise ValueError(f"catalog option timeout_s must be a positive number of seconds, not {timeout!r}")
        self.timeout_s = float(timeout)
        self.max_tokens = max_tokens
        self._tokenizer = tokenizer
        self._specials = tokenizer.num_special_tokens_to_add()
        config = {"side_path": str(side_path()), "model_path": str(path), "threads": threads}
        self.process = ConversionProcess("sift_server.adapters.gliner2_v2_child", config, START_TIMEOUT_S)
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("entities",),
            max_sequence_length=max_tokens,
            runtime={"backend": "torch", "precision": "fp32", "selected_by": "adapter (gliner2 2.0.0, PyTorch fp32)"},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> Gliner2V2Adapter:
        from transformers import AutoTokenizer

        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"gliner2 2.x runs on PyTorch only, not backend {ctx.backend!r}")
        if not (side_path() / "gliner2").is_dir():
            raise ValueError(
                f"gliner2 {GLINER2_V2_VERSION} is not installed at {side_path()}: run scripts/bootstrap.sh "
                "(it installs the 2.x release beside the 1.3.2 that the GLiNER2 v1 models need)"
            )
        path = Path(ctx.path)
        for name in ("config.json", "encoder_config"):
            if not (path / name).exists():
                raise ValueError(f"{path} is not a GLiNER2 checkpoint: it lacks {name}")
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        limits = [x for x in (ctx.max_sequence_length,) if isinstance(x, int) and x > 0]
        adapter = cls(path, tokenizer, ctx.options, min(limits) if limits else DEFAULT_MAX_TOKENS, ctx.torch_threads)
        adapter.process.start()
        return adapter

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(
            task,
            "a GLiNER2 2.x entity model",
            flat_ner=task.flat_ner,
            classification_type=task.classification_type,
            label_groups=task.label_groups,
            examples=task.examples,
            output_schema=task.output_schema,
            instruction=task.instruction,
            multi_label=task.multi_label,
        )
        unknown = sorted(set(task.options) - {"threshold"})
        if unknown:
            raise InvalidInput(f"A GLiNER2 2.x entity model takes only options.threshold, not {unknown}.")
        labels = _labels(task.labels)
        threshold = task.threshold if task.threshold is not None else self.threshold
        prompt = self._prompt_tokens(labels)
        costs = []
        for index, text in enumerate(task.texts):
            if not text.strip():
                raise InvalidInput(f"item {index}: a GLiNER2 2.x entity model needs non-blank text.")
            costs.append(self._row_tokens(index, text, prompt))
        payload = EntitiesPayload(list(task.texts), labels, float(threshold))
        # Usage counts each text's tokens (the reference bills the row's document segment).
        usage = sum(costs) - len(costs) * prompt
        return Prepared(
            item_costs=costs, compat_key=("gliner2-v2", labels, payload.threshold), payload=payload, input_tokens=usage
        )

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        return forward_by_key(parts, self._run)

    def memory_bytes(self) -> int:
        # The model lives in the child; its weights are what it holds.
        return sum(f.stat().st_size for f in self.path.glob("*.safetensors"))

    def close(self) -> None:
        self.process.stop()

    def _run(self, payload: EntitiesPayload, texts: list[str]) -> list[dict[str, Any]]:
        try:
            status, answers = self.process.call((texts, list(payload.labels), payload.threshold), self.timeout_s)
        except (ConversionTimeout, ConversionCrashed) as exc:
            raise RuntimeError(f"gliner2 {GLINER2_V2_VERSION}: {exc}") from exc
        if status != "ok":
            raise RuntimeError(f"gliner2 {GLINER2_V2_VERSION} failed: {answers}")
        return [item_answer(answer, text) for answer, text in zip(answers, texts, strict=True)]

    def _prompt_tokens(self, labels: tuple[str, ...]) -> int:
        counts = self._tokenizer(list(labels), add_special_tokens=False, verbose=False)["input_ids"]
        tokens = sum(len(ids) for ids in counts) + _TOKENS_PER_LABEL * len(labels)
        if tokens > self.max_prompt_tokens:
            raise InputTooLong(
                f"The labels take about {tokens} prompt tokens; this model takes at most {self.max_prompt_tokens}.",
                tokens=tokens,
                max_tokens=self.max_prompt_tokens,
            )
        return tokens

    def _row_tokens(self, index: int, text: str, prompt: int) -> int:
        """About the tokens of the row the library encodes: the labels' prompt and the text."""
        read = text if text.rstrip().endswith(_SENTENCE_END) else text + "."
        document = len(self._tokenizer(read, add_special_tokens=False, verbose=False)["input_ids"])
        row = prompt + document + _ROW_OVERHEAD
        if row > self.max_tokens:
            raise InputTooLong(
                f"item {index}: about {row} tokens with the labels, more than the model's {self.max_tokens}; "
                "send a shorter text (GLiNER2 2.x entity models read a text whole, never cut).",
                index=index,
                tokens=row,
                max_tokens=self.max_tokens,
            )
        return row


def item_answer(answer: Mapping[str, Any], text: str) -> dict[str, Any]:
    """One item in the wire shape from the child's answer: entities in text order, row counts in data."""
    found: list[tuple[int, int, str, float]] = []
    for label, spans in answer["entities"].items():
        for span in spans:
            start, end = int(span["start"]), min(int(span["end"]), len(text))
            score = float(span["confidence"])
            # Past the text is only the "." gliner2 appends to a text without a sentence end.
            if 0 <= start < end and math.isfinite(score):
                found.append((start, end, str(label), score))
    found.sort(key=lambda entity: entity[0])  # stable: the library's order within a start
    entities = [
        {"text": text[start:end], "label": label, "score": score, "start": start, "end": end}
        for start, end, label, score in found
    ]
    row, document = int(answer["row_tokens"]), int(answer["document_tokens"])
    return extract_item(entities=entities) | {
        "data": {"encoded_row_token_count": row, "schema_prompt_token_count": row - document}
    }


def _labels(given: Sequence[str]) -> tuple[str, ...]:
    if not given:
        raise InvalidInput("A GLiNER2 2.x entity model needs the entity types to find: pass params.labels.")
    labels = tuple(given)
    for label in labels:
        if not label.strip():
            raise InvalidInput("Entity labels must be non-blank strings.")
        if len(label) > MAX_LABEL_CHARS:
            raise InvalidInput(f"Entity labels may have at most {MAX_LABEL_CHARS} characters each.")
        if any(marker in label for marker in _MARKERS):
            raise InvalidInput(f"Entity label {label!r} holds a marker of GLiNER2's prompt ({', '.join(_MARKERS)}).")
    if len(set(labels)) != len(labels):
        raise InvalidInput("Entity labels must be unique.")
    return labels


def _positive_int(options: Mapping[str, Any], name: str, default: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"catalog option {name} must be a positive integer, not {value!r}")
    return value
