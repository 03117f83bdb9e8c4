"""The plain rules behind the ``ctranslate2`` generation adapter: an encoder-decoder's
context bounds the prompt alone, what a greedy engine without grammars refuses, and
which waiting requests make the next static batch."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import pytest

from sift_server.errors import InputTooLong, InvalidInput
from sift_server.generation.ctranslate2_engine import take_batch
from sift_server.generation.params import GrammarSpec, Limits, Sampling, check_context, check_engine

SEQ2SEQ = Limits(context_tokens=8, max_new_tokens_cap=16, answer_in_context=False)
DECODER = Limits(context_tokens=8, max_new_tokens_cap=16)


def test_an_encoder_decoders_answer_does_not_count_against_the_prompts_context() -> None:
    check_context(8, Sampling(max_new_tokens=16), SEQ2SEQ, max_field="max_new_tokens")
    with pytest.raises(InputTooLong):
        check_context(9, Sampling(max_new_tokens=1), SEQ2SEQ, max_field="max_new_tokens")
    with pytest.raises(InvalidInput):
        check_context(0, Sampling(max_new_tokens=1), SEQ2SEQ, max_field="max_new_tokens")
    # A decoder-only model's context holds both, as before.
    with pytest.raises(InvalidInput):
        check_context(4, Sampling(max_new_tokens=5), DECODER, max_field="max_new_tokens")


def test_a_greedy_engine_without_grammars_refuses_sampling_and_grammars() -> None:
    check_engine(Sampling(max_new_tokens=4), greedy_only=True, grammar=False)
    with pytest.raises(InvalidInput) as sampled:
        check_engine(Sampling(max_new_tokens=4, temperature=0.5), greedy_only=True, grammar=False)
    assert sampled.value.extra["param"] == "temperature"
    with pytest.raises(InvalidInput) as nucleus:
        check_engine(Sampling(max_new_tokens=4, top_p=0.9), greedy_only=True, grammar=False)
    assert nucleus.value.extra["param"] == "top_p"
    constrained = Sampling(max_new_tokens=4, grammar=GrammarSpec("regex", "[a-z]+"))
    with pytest.raises(InvalidInput) as refused:
        check_engine(constrained, greedy_only=True, grammar=False, grammar_field="response_format")
    assert refused.value.extra["param"] == "response_format"
    # An engine that samples and constrains takes both.
    both = Sampling(max_new_tokens=4, temperature=0.5, grammar=constrained.grammar)
    check_engine(both, greedy_only=False, grammar=True)


@dataclass
class Waiting:
    name: str
    cancelled: bool = False


def test_the_next_batch_is_the_oldest_live_requests_up_to_the_limit() -> None:
    waiting = deque([Waiting("a"), Waiting("b", cancelled=True), Waiting("c"), Waiting("d"), Waiting("e")])
    assert [r.name for r in take_batch(waiting, 3)] == ["a", "c", "d"]
    assert [r.name for r in waiting] == ["e"]
    assert [r.name for r in take_batch(waiting, 3)] == ["e"]
    assert take_batch(waiting, 3) == []
