"""How an instruction-following embedder turns a request's texts into model input,
as the reference server does it (its ``query_template``, ``doc_template`` and
``default_instruction`` runtime options, which a catalog entry sets and a request
may override):

- a query with a template: the template with ``{instruction}`` (the request's
  instruction, else the default one) and ``{text}`` filled in;
- a document with a template: the same with ``doc_template`` (no default instruction);
- no template: ``"{instruction} {text}"`` when an instruction is given, the text alone otherwise.

Pure string work; the decoder embedder calls it in ``prepare``."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sift_server.errors import InvalidInput

FIELDS = frozenset({"text", "instruction"})


@dataclass(frozen=True, slots=True)
class Templates:
    query: str | None = None
    document: str | None = None
    default_instruction: str | None = None

    def overridden(self, options: Mapping[str, Any]) -> Templates:
        """The request's ``query_template``, ``doc_template`` and ``default_instruction`` over these."""
        return Templates(
            query=_string(options, "query_template", self.query),
            document=_string(options, "doc_template", self.document),
            default_instruction=_string(options, "default_instruction", self.default_instruction),
        )


def _string(options: Mapping[str, Any], key: str, default: str | None) -> str | None:
    if key not in options:
        return default
    value = options[key]
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"Option '{key}' must be a string or null.")
    return value


def check_template(template: str | None, where: str) -> None:
    """A template names only ``{text}`` and ``{instruction}`` (else a clear error, not a KeyError)."""
    if template is None:
        return
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise InvalidInput(f"{where} is not a valid template: {exc}.") from None
    unknown = names - FIELDS
    if unknown:
        raise InvalidInput(f"{where} names {sorted(unknown)}; a template may use only {{text}} and {{instruction}}.")


def model_inputs(texts: Sequence[str], *, is_query: bool, instruction: str | None, templates: Templates) -> list[str]:
    template = templates.query if is_query else templates.document
    if instruction is None and is_query:
        instruction = templates.default_instruction
    if template:
        check_template(template, "query_template" if is_query else "doc_template")
        return [template.format(text=text, instruction=instruction or "") for text in texts]
    if instruction:
        return [f"{instruction} {text}" for text in texts]
    return list(texts)
