"""Structured output: a request's grammar (native ``grammar`` or OpenAI
``response_format``) as a :class:`GrammarSpec`, compiled once before it reaches the
engine. The engine's constrained decoding (xgrammar, inside OpenVINO GenAI) fails
the whole batch on a grammar it cannot compile, so a bad one is refused here, a 400
before any token, with the same compiler (the ``xgrammar`` package)."""

from __future__ import annotations

import json
import re
from typing import Any

from sift_server.errors import InvalidInput
from sift_server.generation.params import GrammarKind, GrammarSpec
from sift_server.generation.wire import Grammar, ResponseFormat

# xgrammar prefixes its messages with a time and its source file.
_WHERE = re.compile(r"^\[[^\]]*\] \S+:\d+: ")
# What json_object asks for: any JSON object.
ANY_OBJECT = '{"type": "object"}'


def from_native(grammar: Grammar | None) -> GrammarSpec | None:
    if grammar is None:
        return None
    given = [(kind, value) for kind, value in _variants(grammar) if value is not None]
    if len(given) != 1:
        raise InvalidInput(
            "Set exactly one of 'grammar.json_schema', 'grammar.regex', 'grammar.ebnf'.", param="grammar"
        )
    kind, value = given[0]
    if kind == "json_schema":
        return checked(GrammarSpec("json_schema", _schema_text(value, "grammar")))
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"'grammar.{kind}' must be a non-empty string.", param="grammar")
    return checked(GrammarSpec(kind, value))


def _variants(grammar: Grammar) -> list[tuple[Any, Any]]:
    return [("json_schema", grammar.json_schema), ("regex", grammar.regex), ("ebnf", grammar.ebnf)]


def from_response_format(response_format: ResponseFormat | None, *, compile: bool = True) -> GrammarSpec | None:
    """``compile=False`` checks the shape only (a remote model: its upstream compiles)."""
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return GrammarSpec("json_schema", ANY_OBJECT)
    if response_format.type in ("regex", "grammar"):
        kind: GrammarKind = "regex" if response_format.type == "regex" else "ebnf"
        text = response_format.regex if kind == "regex" else response_format.grammar
        if not isinstance(text, str) or not text:
            field = "regex" if kind == "regex" else "grammar"
            raise InvalidInput(f"'response_format.{field}' must be a non-empty string.", param="response_format")
        return checked(GrammarSpec(kind, text)) if compile else GrammarSpec(kind, text)
    spec = response_format.json_schema
    if spec is None or spec.schema is None:
        raise InvalidInput("'response_format.json_schema.schema' is required.", param="response_format")
    wanted = GrammarSpec("json_schema", _schema_text(spec.schema, "response_format"))
    return checked(wanted) if compile else wanted


def _schema_text(schema: Any, param: str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidInput(f"The JSON schema is not JSON: {exc}", param=param) from exc
    if not isinstance(schema, (dict, bool)):
        raise InvalidInput("A JSON schema is an object.", param=param)
    return json.dumps(schema)


def checked(spec: GrammarSpec) -> GrammarSpec:
    """``spec`` if xgrammar compiles it, else an ``InvalidInput`` with its reason."""
    import xgrammar

    try:
        if spec.kind == "json_schema":
            xgrammar.Grammar.from_json_schema(spec.text)
        elif spec.kind == "regex":
            xgrammar.Grammar.from_regex(spec.text)
        else:
            xgrammar.Grammar.from_ebnf(spec.text)
    except Exception as exc:  # xgrammar raises RuntimeError / ValueError from its C++ core
        lines = str(exc).strip().splitlines()
        reason = _WHERE.sub("", lines[-1]) if lines else type(exc).__name__
        raise InvalidInput(f"The {spec.kind} grammar does not compile: {reason}", param="grammar") from exc
    return spec
