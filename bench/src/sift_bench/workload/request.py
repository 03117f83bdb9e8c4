"""What each bench request asks for: the primitive and its fixed parameters.

One request carries the workload's texts; this says what to do with them, so
the same phases measure any model: dense, sparse or multivector encode, score
(one fixed query against the texts) or extract (fixed labels)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Primitive = Literal["encode", "score", "extract"]
PRIMITIVES: tuple[Primitive, ...] = ("encode", "score", "extract")
OutputType = Literal["dense", "sparse", "multivector"]
OUTPUT_TYPES: tuple[OutputType, ...] = ("dense", "sparse", "multivector")
DEFAULT_QUERY = "What does a search service do under sustained load?"
DEFAULT_LABELS = ("person", "location", "organization", "date")


@dataclass(frozen=True, slots=True)
class RequestSpec:
    primitive: Primitive = "encode"
    output_type: OutputType = "dense"
    query: str = DEFAULT_QUERY
    labels: tuple[str, ...] = field(default=DEFAULT_LABELS)

    @property
    def route(self) -> str:
        return self.primitive

    def body(self, texts: list[str]) -> dict[str, Any]:
        """The native request body for ``texts``."""
        items = [{"text": text} for text in texts]
        if self.primitive == "score":
            return {"query": {"text": self.query}, "items": items}
        if self.primitive == "extract":
            return {"items": items, "params": {"labels": list(self.labels)}}
        if self.output_type != "dense":
            return {"items": items, "params": {"output_types": [self.output_type]}}
        return {"items": items}

    def describe(self) -> str:
        if self.primitive == "encode":
            return f"encode ({self.output_type})"
        if self.primitive == "score":
            return "score (one query against each request's texts)"
        return f"extract (labels {', '.join(self.labels)})"


def check_answer(spec: RequestSpec, body: Any, items: int) -> str | None:
    """Why a decoded native answer is not one result per text (None: it is).
    Dense vectors are checked in depth elsewhere (``client.validate_dense``)."""
    if not isinstance(body, dict):
        return f"expected an object, got {type(body).__name__}"
    rows = body.get("items") if spec.primitive != "score" else body.get("scores")
    if not isinstance(rows, list) or len(rows) != items:
        return f"expected {items} results, got {len(rows) if isinstance(rows, list) else type(rows).__name__}"
    if spec.primitive == "encode" and not all(isinstance(r, dict) and spec.output_type in r for r in rows):
        return f"an item lacks its {spec.output_type} output"
    return None


ENCODE_DENSE = RequestSpec()
