"""Extract options are validated once, in the service, into typed task fields;
each bad value is a 400 INVALID_INPUT whose message names the option."""

from __future__ import annotations

from typing import Any

import pytest

from sift_server.adapters.base import FewShotExample
from sift_server.errors import InvalidInput
from sift_server.service.extract_options import extract_task


def task(labels: list[Any] | None = None, **options: Any) -> Any:
    return extract_task(["a text"], ["x", "y"] if labels is None else labels, options, None, "truncate")


def test_typed_values() -> None:
    t = task(
        threshold=0.25,
        flat_ner=False,
        multi_label=True,
        classification_type="multi_label",
        examples=[{"text": "ex", "labels": ["x"]}],
    )
    assert t.labels == ("x", "y")
    assert t.threshold == 0.25 and t.flat_ner is False and t.multi_label is True
    assert t.classification_type == "multi-label"
    assert t.examples == (FewShotExample("ex", ("x",)),)
    assert t.label_groups is None


def test_unset_options_stay_unset() -> None:
    t = task()
    assert t.threshold is None and t.flat_ner is None and t.multi_label is None
    assert t.classification_type is None and t.examples == () and t.label_groups is None


def test_label_groups() -> None:
    t = task([], label_groups={"sentiment": ["pos", "neg", "pos"], "topic": ["a"]})
    assert t.label_groups == (("sentiment", ("pos", "neg")), ("topic", ("a",)))
    assert t.labels == ()
    # Examples may name a group's label bare or as group.label.
    t = task([], label_groups={"s": ["pos"]}, examples=[{"text": "e", "labels": ["pos", "s.pos"]}])
    assert t.examples[0].labels == ("pos", "s.pos")


@pytest.mark.parametrize(
    ("labels", "options", "named"),
    [
        (None, {"threshold": 1.5}, "threshold"),
        (None, {"threshold": "high"}, "threshold"),
        (None, {"threshold": True}, "threshold"),
        (None, {"flat_ner": "yes"}, "flat_ner"),
        (None, {"multi_label": 1}, "multi_label"),
        (None, {"classification_type": "both"}, "classification_type"),
        (None, {"classification_type": 3}, "classification_type"),
        (None, {"classification_type": "single-label", "multi_label": True}, "classification_type"),
        (None, {"label_groups": {"g": ["a"]}}, "label_groups"),  # labels too
        ([], {"label_groups": ["a"]}, "label_groups"),
        ([], {"label_groups": {}}, "label_groups"),
        ([], {"label_groups": {"g": []}}, "label_groups"),
        ([], {"label_groups": {"g": ["a", 3]}}, "label_groups"),
        ([], {"label_groups": {"g": [f"l{i}" for i in range(1001)]}}, "label_groups"),
        (None, {"examples": {"text": "a"}}, "examples"),
        (None, {"examples": ["a"]}, "examples[0]"),
        (None, {"examples": [{"text": "", "labels": ["x"]}]}, "examples[0]"),
        (None, {"examples": [{"text": "a", "labels": "x"}]}, "examples[0]"),
        (None, {"examples": [{"text": "a", "labels": ["x"]}, {"text": "b", "labels": ["nope"]}]}, "examples[1]"),
        (None, {"examples": [{"text": "a", "labels": ["x"]}] * 65}, "examples"),
        (["ok", ""], {}, "labels"),
        ([f"l{i}" for i in range(1001)], {}, "labels"),
    ],
)
def test_bad_options_name_themselves(labels: list[Any] | None, options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        task(labels, **options)
    assert named in caught.value.message
