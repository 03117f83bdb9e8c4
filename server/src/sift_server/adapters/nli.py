"""NLI zero-shot classification: an NLI cross-encoder reads each text with one
hypothesis per label ("This text is about {label}.") and the label's score is
how strongly the text entails that hypothesis.

Single-label (the default): a softmax of the entailment logits across the
request's labels. Multi-label, or a request with one label: per label, a
softmax of (contradiction, entailment). Both are the rules of transformers'
zero-shot pipeline and of the reference server's NLI adapter; results go to
``classifications`` as ``{label, score}``, every label, best first (ties keep
the request's label order).

The entailment and contradiction classes are found by the model's own
``id2label`` names (a binary ``entailment``/``not_entailment`` head uses the
latter as contradiction), never by position; a head without such names fails
its load. The reference takes contradiction by position (the last class when
entailment is the first, else the first), which is the same class for the usual
orders. Options per request: ``hypothesis_template`` (one ``{}``),
``multi_label`` (or ``classification_type``) and ``threshold`` (labels below it
are left out; the reference has none). The instruction is ignored, as the
reference does.

Every (text, hypothesis) pair is a row of one padded forward; pairs longer than
the model reads are cut from their longer side (the text, in practice), or are
a 400 ``INPUT_TOO_LONG`` with ``overflow_policy: error``. ``usage.input_tokens``
counts every pair's tokens, as the reference does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._extract_common import (
    catalog_flag,
    catalog_threshold,
    extract_item,
    reject_options,
    resolve_labels,
    text_extract_task,
)
from sift_server.adapters._probes import GLICLASS_PROBE_LABELS, PROBE_TEXTS
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.seam import Runner
from sift_server.adapters.backends.select import SCORES, may_run_torch, select
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.adapters.cross_encoder import ClassifierLogits, effective_max_length, padded_logits
from sift_server.errors import InputTooLong, InvalidInput

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_TEMPLATE = "This text is about {}."
# Every request may share a forward: labels, template and mode are per item.
NLI_COMPAT_KEY = "nli"
_ENTAILMENT = ("entailment",)
_CONTRADICTION = ("contradiction", "not_entailment", "non_entailment")


class NliLogits(ClassifierLogits):
    kind = "nli"


@dataclass(frozen=True, slots=True)
class NliPayload:
    """One request: each item's pairs (tokenized), its labels, mode and threshold."""

    pairs: list[list[dict[str, list[int]]]]
    labels: tuple[str, ...]
    multi_label: bool
    threshold: float | None


@dataclass(frozen=True, slots=True)
class NliClasses:
    """Where entailment and contradiction are among the head's outputs."""

    entailment: int
    contradiction: int


def nli_classes(id2label: Mapping[int, str]) -> NliClasses:
    """Entailment and contradiction by the head's own label names; raises ``ValueError``
    naming the labels when either cannot be found."""
    names = {int(index): _normalise(str(name)) for index, name in id2label.items()}
    entailment = [i for i, name in names.items() if name in _ENTAILMENT]
    contradiction = [i for i, name in names.items() if name in _CONTRADICTION]
    if len(entailment) == 1 and not contradiction and len(names) == 2:
        # A binary head whose other class is named otherwise (say "neutral_or_contradiction").
        contradiction = [i for i in names if i != entailment[0]]
    if len(entailment) != 1 or len(contradiction) != 1:
        raise ValueError(
            "an NLI model needs id2label to name one entailment class and one contradiction "
            f"(or not_entailment) class; this one has {dict(sorted(id2label.items()))}"
        )
    return NliClasses(entailment[0], contradiction[0])


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def nli_scores(logits: np.ndarray, classes: NliClasses, multi_label: bool) -> np.ndarray:
    """Scores of one text's labels from its (labels, classes) logits."""
    values = logits.astype(np.float64)
    if multi_label or values.shape[0] == 1:
        pair = values[:, [classes.contradiction, classes.entailment]]
        pair = np.exp(pair - pair.max(axis=1, keepdims=True))
        return np.asarray(pair[:, 1] / pair.sum(axis=1))
    entail = values[:, classes.entailment]
    entail = np.exp(entail - entail.max())
    return np.asarray(entail / entail.sum())


def hypothesis_template(value: object) -> str:
    """A template with one ``{}`` the label goes into; 400 otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("Option 'hypothesis_template' must be a non-empty string with one '{}' for the label.")
    try:
        filled = value.format("\x00")
    except (IndexError, KeyError, ValueError):
        raise InvalidInput(
            "Option 'hypothesis_template' must hold exactly one '{}' for the label "
            "(write other braces as '{{' and '}}')."
        ) from None
    if filled.count("\x00") != 1:
        raise InvalidInput("Option 'hypothesis_template' must hold exactly one '{}' for the label.")
    return value


class NliAdapter(Adapter):
    """Zero-shot classification with an NLI sequence-classification head."""

    def __init__(
        self,
        runner: Runner,
        tokenizer: PreTrainedTokenizerBase,
        classes: NliClasses,
        options: Mapping[str, Any],
        max_length: int,
        runtime: dict[str, Any] | None = None,
    ) -> None:
        self.runner = runner
        self.classes = classes
        # Catalog defaults, checked here so a bad entry fails its load.
        try:
            self.template = hypothesis_template(options.get("hypothesis_template", DEFAULT_TEMPLATE))
        except InvalidInput as error:
            raise ValueError(f"catalog option hypothesis_template: {error.message}") from None
        self.multi_label = catalog_flag(options, "multi_label", False)
        self.threshold = catalog_threshold(options, None)
        self.max_length = max_length
        # prepare (event loop) and forward (executor thread) each own a fast tokenizer.
        self.tokenizer = tokenizer
        self._pad_tokenizer = copy.deepcopy(tokenizer)
        self._input_names = tuple(tokenizer.model_input_names)
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("classifications",),
            max_sequence_length=max_length,
            runtime=runtime or runner.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> NliAdapter:
        from transformers import AutoConfig, AutoTokenizer

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options) if may_run_torch(ctx.backend) else select_device({"device": "cpu"})
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        config = AutoConfig.from_pretrained(ctx.path, local_files_only=True)
        classes = nli_classes(config.id2label)
        max_length = effective_max_length(ctx.max_sequence_length, tokenizer, config)
        names = tuple(tokenizer.model_input_names)
        hypotheses = [DEFAULT_TEMPLATE.format(label) for label in GLICLASS_PROBE_LABELS]
        probe = tokenizer(
            [text for text in PROBE_TEXTS for _ in hypotheses],
            hypotheses * len(PROBE_TEXTS),
            truncation=True,
            max_length=max_length,
        )
        pairs = [{name: probe[name][i] for name in names} for i in range(len(probe["input_ids"]))]

        def evaluate(runner: Runner) -> np.ndarray:
            step = len(hypotheses)
            return np.concatenate(
                [padded_logits(runner, tokenizer, pairs[i : i + step]) for i in range(0, len(pairs), step)]
            )

        runner, runtime = select(
            ctx,
            NliLogits(ctx.path, names),
            evaluate,
            SCORES,
            open_runner,
            device=str(device),
            probe_key=f"nli:{max_length}",
        )
        return cls(runner, tokenizer, classes, ctx.options, max_length, runtime)

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(
            task,
            "an NLI zero-shot classifier",
            flat_ner=task.flat_ner,
            label_groups=task.label_groups,
            examples=task.examples,
        )
        labels = resolve_labels(task)
        template = self.template
        if "hypothesis_template" in task.options:
            template = hypothesis_template(task.options["hypothesis_template"])
        if task.classification_type is not None:
            multi_label = task.classification_type == "multi-label"
        else:
            multi_label = task.multi_label if task.multi_label is not None else self.multi_label
        hypotheses = [template.format(label) for label in labels]
        texts = [text for text in task.texts for _ in hypotheses]
        error = task.overflow == "error"
        kwargs: dict[str, Any] = {"verbose": False, "truncation": not error}
        if not error:
            kwargs["max_length"] = self.max_length
        encoded = self.tokenizer(texts, hypotheses * len(task.texts), **kwargs)
        ids: list[list[int]] = encoded["input_ids"]
        if error:
            self._check_lengths(ids, len(hypotheses))
        rows = [{name: encoded[name][i] for name in self._input_names} for i in range(len(ids))]
        step = len(hypotheses)
        per_item = [rows[i : i + step] for i in range(0, len(rows), step)]
        costs = [sum(len(row["input_ids"]) for row in item) for item in per_item]
        payload = NliPayload(
            pairs=per_item,
            labels=labels,
            multi_label=multi_label,
            threshold=task.threshold if task.threshold is not None else self.threshold,
        )
        return Prepared(item_costs=costs, compat_key=NLI_COMPAT_KEY, payload=payload, input_tokens=sum(costs))

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        rows = [row for part in parts for item in part.prepared.payload.pairs[part.start : part.stop] for row in item]
        logits = padded_logits(self.runner, self._pad_tokenizer, rows)
        outputs: list[list[Any]] = []
        offset = 0
        for part in parts:
            payload: NliPayload = part.prepared.payload
            items = []
            for _ in range(part.start, part.stop):
                block = logits[offset : offset + len(payload.labels)]
                offset += len(payload.labels)
                items.append(_item(payload, nli_scores(block, self.classes, payload.multi_label)))
            outputs.append(items)
        return outputs

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes()

    def close(self) -> None:
        self.runner.close()

    def _check_lengths(self, ids: list[list[int]], per_item: int) -> None:
        for row, pair in enumerate(ids):
            if len(pair) > self.max_length:
                index = row // per_item
                raise InputTooLong(
                    f"item {index}: text and hypothesis take {len(pair)} tokens, "
                    f"more than the model's {self.max_length}",
                    index=index,
                    tokens=len(pair),
                    max_tokens=self.max_length,
                )


def _item(payload: NliPayload, scores: np.ndarray) -> dict[str, Any]:
    kept = [
        (label, float(score))
        for label, score in zip(payload.labels, scores, strict=True)
        if payload.threshold is None or score >= payload.threshold
    ]
    kept.sort(key=lambda pair: -pair[1])  # stable: ties keep label order
    return extract_item(classifications=[{"label": label, "score": score} for label, score in kept])
