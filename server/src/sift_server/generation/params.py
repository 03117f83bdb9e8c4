"""What one generation asks of the engine, checked before any work: plain data and
plain rules, no engine and no I/O (unit-tested in tests/generation/test_params.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sift_server.errors import InputTooLong, InvalidInput

GrammarKind = Literal["json_schema", "regex", "ebnf"]


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """A constraint the engine's structured-output decoding enforces."""

    kind: GrammarKind
    text: str


@dataclass(frozen=True, slots=True)
class Sampling:
    """Greedy when ``temperature`` is 0 (the default: answers are repeatable)."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    grammar: GrammarSpec | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True, slots=True)
class Limits:
    """A model's bounds: its context and the most tokens one answer may ask for.
    A decoder-only model's context holds the prompt and the answer together
    (``answer_in_context``); an encoder-decoder's holds the prompt only (the answer
    is the decoder's, bounded by the cap alone)."""

    context_tokens: int
    max_new_tokens_cap: int
    answer_in_context: bool = True


MAX_STOPS = 4
MAX_STOP_CHARS = 256


def sampling(
    *,
    max_new_tokens: int | None,
    default_max_new_tokens: int,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None = None,
    seed: int | None,
    stop: str | list[str] | None,
    grammar: GrammarSpec | None,
    limits: Limits,
    max_field: str = "max_new_tokens",
) -> Sampling:
    """The request's sampling, each value checked against its range and the model's cap."""
    wanted = default_max_new_tokens if max_new_tokens is None else max_new_tokens
    if wanted < 1:
        raise InvalidInput(f"'{max_field}' must be at least 1.", param=max_field)
    if wanted > limits.max_new_tokens_cap:
        raise InvalidInput(
            f"'{max_field}' is {wanted}; this model answers at most {limits.max_new_tokens_cap} tokens.",
            param=max_field,
        )
    if temperature is not None and not 0.0 <= temperature <= 2.0:
        raise InvalidInput("'temperature' must be between 0 and 2.", param="temperature")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise InvalidInput("'top_p' must be in (0, 1].", param="top_p")
    if top_k is not None and top_k < 0:
        raise InvalidInput("'top_k' must not be negative.", param="top_k")
    if seed is not None and not -(2**63) <= seed < 2**64:
        raise InvalidInput("'seed' must fit in 64 bits.", param="seed")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOPS:
        raise InvalidInput(f"At most {MAX_STOPS} stop sequences.", param="stop")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidInput(f"Stop sequences must be 1 to {MAX_STOP_CHARS} characters.", param="stop")
    return Sampling(
        max_new_tokens=wanted,
        temperature=0.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=top_k or 0,
        seed=seed,
        stop=stops,
        grammar=grammar,
    )


def check_context(prompt_tokens: int, wanted: Sampling, limits: Limits, *, max_field: str) -> None:
    """A prompt that leaves no room, or too little for the answer asked, is refused."""
    if prompt_tokens == 0:
        raise InvalidInput("The prompt is empty.", param="prompt")
    if not limits.answer_in_context:
        if prompt_tokens > limits.context_tokens:
            raise InputTooLong(
                f"The prompt is {prompt_tokens} tokens; this model reads at most {limits.context_tokens} tokens."
            )
        return
    if prompt_tokens >= limits.context_tokens:
        raise InputTooLong(
            f"The prompt is {prompt_tokens} tokens; this model's context is {limits.context_tokens} tokens."
        )
    if prompt_tokens + wanted.max_new_tokens > limits.context_tokens:
        room = limits.context_tokens - prompt_tokens
        raise InvalidInput(
            f"The prompt ({prompt_tokens} tokens) and '{max_field}' ({wanted.max_new_tokens}) exceed this model's "
            f"context of {limits.context_tokens} tokens; ask for at most {room}.",
            param=max_field,
        )


def check_engine(wanted: Sampling, *, greedy_only: bool, grammar: bool, grammar_field: str = "grammar") -> None:
    """What the model's engine cannot do is refused before it sees the request."""
    if greedy_only and not wanted.greedy:
        raise InvalidInput("This model decodes greedily only: 'temperature' must be 0.", param="temperature")
    if greedy_only and wanted.top_p != 1.0:
        raise InvalidInput("This model decodes greedily only: 'top_p' must be 1.", param="top_p")
    if not grammar and wanted.grammar is not None:
        raise InvalidInput(
            "This model's engine has no constrained decoding: grammars and response_format "
            "json_schema / json_object are not supported.",
            param=grammar_field,
        )
