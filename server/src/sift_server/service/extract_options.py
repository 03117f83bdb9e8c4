"""Extract request options, validated once and turned into typed ``ExtractTask``
fields (API.md §4.1). Adapters receive only typed values and apply their
catalog defaults; what a model cannot do (say ``label_groups`` on an entity
model) is the adapter's 400, since only it knows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sift_server.adapters.base import ClassificationType, ExtractTask, FewShotExample, OverflowPolicy
from sift_server.errors import InvalidInput

MAX_LABELS = 1000
MAX_EXAMPLES = 64
# The spellings the gliclass pipeline accepts, as the reference server passes them through.
CLASSIFICATION_TYPES: dict[str, ClassificationType] = {
    "single-label": "single-label",
    "single_label": "single-label",
    "single": "single-label",
    "multi-label": "multi-label",
    "multi_label": "multi-label",
    "multi": "multi-label",
}


def _labels(value: Sequence[Any], where: str) -> tuple[str, ...]:
    for label in value:
        if not isinstance(label, str) or not label.strip():
            raise InvalidInput(f"{where} must hold non-empty strings.")
    return tuple(dict.fromkeys(value))


def _threshold(options: Mapping[str, Any]) -> float | None:
    value = options.get("threshold")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput("Option 'threshold' must be a number between 0 and 1.")
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidInput("Option 'threshold' must be a number between 0 and 1.")
    return float(value)


def _flag(options: Mapping[str, Any], name: str) -> bool | None:
    value = options.get(name)
    if value is not None and not isinstance(value, bool):
        raise InvalidInput(f"Option '{name}' must be true or false.")
    return value


def _classification_type(options: Mapping[str, Any], multi_label: bool | None) -> ClassificationType | None:
    value = options.get("classification_type")
    if value is None:
        return None
    kind = CLASSIFICATION_TYPES.get(value.strip().lower()) if isinstance(value, str) else None
    if kind is None:
        raise InvalidInput("Option 'classification_type' must be 'single-label' or 'multi-label'.")
    if multi_label is not None and multi_label != (kind == "multi-label"):
        raise InvalidInput(f"Options 'classification_type' ({kind}) and 'multi_label' ({multi_label}) disagree.")
    return kind


def _label_groups(options: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    value = options.get("label_groups")
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise InvalidInput("Option 'label_groups' must be a non-empty object of group name to a list of labels.")
    groups = []
    total = 0
    for name, labels in value.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput("Option 'label_groups': group names must be non-empty strings.")
        if not isinstance(labels, list) or not labels:
            raise InvalidInput(f"Option 'label_groups': group '{name}' must be a non-empty list of labels.")
        group = _labels(labels, f"Option 'label_groups': group '{name}'")
        total += len(group)
        groups.append((name, group))
    if total > MAX_LABELS:
        raise InvalidInput(f"Option 'label_groups' holds {total} labels; extract accepts at most {MAX_LABELS}.")
    return tuple(groups)


def _known_labels(labels: Sequence[str], groups: Sequence[tuple[str, Sequence[str]]] | None) -> set[str]:
    if groups is None:
        return set(labels)
    known: set[str] = set()
    for name, group in groups:
        known.update(group)
        known.update(f"{name}.{label}" for label in group)
    return known


def _examples(options: Mapping[str, Any], known: set[str]) -> tuple[FewShotExample, ...]:
    value = options.get("examples")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidInput("Option 'examples' must be a list of {text, labels} objects.")
    if len(value) > MAX_EXAMPLES:
        raise InvalidInput(f"Option 'examples' holds {len(value)} examples; at most {MAX_EXAMPLES} are accepted.")
    examples = []
    for index, example in enumerate(value):
        where = f"Option 'examples[{index}]'"
        if not isinstance(example, Mapping):
            raise InvalidInput(f"{where} must be an object with 'text' and 'labels'.")
        text, labels = example.get("text"), example.get("labels")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"{where}: 'text' must be a non-empty string.")
        if not isinstance(labels, list):
            raise InvalidInput(f"{where}: 'labels' must be a list of strings.")
        typed = _labels(labels, f"{where}: 'labels'")
        for label in typed:
            if label not in known:
                raise InvalidInput(f"{where}: label '{label}' is not one of the request's labels.")
        examples.append(FewShotExample(text, typed))
    return tuple(examples)


def extract_task(
    texts: list[str],
    labels: Sequence[Any],
    options: Mapping[str, Any],
    instruction: str | None,
    overflow: OverflowPolicy,
) -> ExtractTask:
    """The typed task of an extract request; raises ``InvalidInput`` naming the option."""
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"Extract accepts at most {MAX_LABELS} labels; got {len(labels)}.")
    typed_labels = _labels(labels, "Field 'labels'")
    groups = _label_groups(options)
    if groups is not None and typed_labels:
        raise InvalidInput("Send either 'labels' or option 'label_groups', not both.")
    multi_label = _flag(options, "multi_label")
    return ExtractTask(
        texts=texts,
        labels=typed_labels,
        threshold=_threshold(options),
        multi_label=multi_label,
        instruction=instruction,
        overflow=overflow,
        options=options,
        flat_ner=_flag(options, "flat_ner"),
        classification_type=_classification_type(options, multi_label),
        label_groups=groups,
        examples=_examples(options, _known_labels(typed_labels, groups)),
    )
