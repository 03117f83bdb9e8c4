"""What each bench request asks for: the primitive and its fixed parameters.

One request carries the workload's texts; this says what to do with them, so
the same phases measure any model: dense, sparse or multivector encode, score
(one fixed query against the texts) or extract (fixed labels). An encode may ask for
several outputs at once (BGE-M3's dense, sparse and multivector from one forward)."""

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
    # encode: outputs asked for beside ``output_type``, in the same request.
    more_output_types: tuple[OutputType, ...] = ()

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> RequestSpec:
        """The spec ``dataclasses.asdict`` wrote out (as JSON: its tuples came back as lists)."""
        tuples: dict[str, Any] = {key: tuple(fields[key]) for key in ("labels", "more_output_types") if key in fields}
        return cls(**{**fields, **tuples})

    @property
    def route(self) -> str:
        return self.primitive

    @property
    def output_types(self) -> tuple[OutputType, ...]:
        """Every output an encode request asks for."""
        return tuple(dict.fromkeys((self.output_type, *self.more_output_types)))

    @property
    def dense_only(self) -> bool:
        """An encode of dense vectors alone (checked in depth: dims, finite values)."""
        return self.primitive == "encode" and self.output_types == ("dense",)

    def body(self, texts: list[str]) -> dict[str, Any]:
        """The native request body for ``texts``."""
        items = [{"text": text} for text in texts]
        if self.primitive == "score":
            return {"query": {"text": self.query}, "items": items}
        if self.primitive == "extract":
            return {"items": items, "params": {"labels": list(self.labels)}}
        if not self.dense_only:
            return {"items": items, "params": {"output_types": list(self.output_types)}}
        return {"items": items}

    def describe(self) -> str:
        if self.primitive == "encode":
            return f"encode ({', '.join(self.output_types)})"
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
    if spec.primitive == "encode":
        for output in spec.output_types:
            if not all(isinstance(r, dict) and r.get(output) is not None for r in rows):
                return f"an item lacks its {output} output"
    return None


ENCODE_DENSE = RequestSpec()
