"""The server's work per token: steps that waited for a busy consumer are joined into one
(engine_process.joined), counted exactly with stop sequences, the tokenizer's decode is
called without transformers' per-id conversion walk (adapter.plain_decode) yet gives the
same text, and the disconnect watch costs no task per piece yet still lets a caller's own
cancellation through (service.until_gone)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sift_server.errors import InferenceError
from sift_server.generation.adapter import plain_decode
from sift_server.generation.engine import Step
from sift_server.generation.engine_process import joined
from sift_server.generation.params import Sampling
from sift_server.generation.service import Piece, Run, pieces, until_gone
from tests.fixtures.tiny_decoder import build_tokenizer

PIECES = {1: "he", 2: "llo", 3: " wor", 4: "ld", 5: "END", 8: "!"}


def waiting(*items: Step | BaseException) -> asyncio.Queue[Step | BaseException]:
    queue: asyncio.Queue[Step | BaseException] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    return queue


def test_steps_waiting_behind_the_first_are_joined_up_to_the_last() -> None:
    queue = waiting(Step((2,)), Step((3, 4), "length"), Step((9,)))
    assert joined(Step((1,)), queue) == (Step((1, 2, 3, 4), "length"), None)
    assert queue.qsize() == 1  # nothing past the finish is taken


def test_a_lone_or_finished_step_is_handed_on_as_it_is() -> None:
    first = Step((1,))
    assert joined(first, waiting())[0] is first
    last = Step((1,), "stop")
    assert joined(last, waiting(Step((2,))))[0] is last


def test_an_error_behind_waiting_steps_comes_after_them() -> None:
    error = InferenceError("gone")
    assert joined(Step((1,)), waiting(Step((2,)), error)) == (Step((1, 2)), error)


class JoinedEngine:
    """An engine whose whole answer arrives as one joined step."""

    def __init__(self, ids: tuple[int, ...]) -> None:
        self.ids = ids

    async def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncIterator[Step]:
        yield Step(self.ids, "length")


class ToyModel:
    def __init__(self, ids: tuple[int, ...]) -> None:
        self.engine = JoinedEngine(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(PIECES[i] for i in ids)


async def answer(ids: tuple[int, ...], stop: tuple[str, ...]) -> tuple[list[Piece], Run]:
    wanted = Sampling(max_new_tokens=len(ids), stop=stop)
    run = Run("toy", ToyModel(ids), [7], wanted, "r", 0.0, prompt_tokens=1)  # type: ignore[arg-type]
    return [piece async for piece in pieces(run)], run


async def test_a_joined_step_counts_its_tokens_up_to_the_stop_sequence() -> None:
    got, run = await answer((1, 2, 5, 8, 3), ("END",))
    assert [(p.text, p.finish) for p in got] == [("hello", "stop")]
    assert run.completion_tokens == 3  # he, llo, END: not the two the engine made after


async def test_a_joined_step_without_stop_sequences_counts_every_token() -> None:
    got, run = await answer((1, 2, 3, 4), ())
    assert [(p.text, p.finish) for p in got] == [("hello world", "length")]
    assert run.completion_tokens == 4


def test_plain_decode_gives_the_tokenizers_own_text(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    build_tokenizer(tmp_path, append_eos=False)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    decode = plain_decode(tokenizer)
    assert decode != tokenizer.decode  # the direct path is the one checked
    rng = random.Random(3)
    vocab = len(tokenizer)
    for n in (1, 2, 5, 40):
        for _ in range(25):
            ids = [rng.randrange(vocab) for _ in range(n)]
            assert decode(ids, skip_special_tokens=True) == tokenizer.decode(ids, skip_special_tokens=True)


def test_a_tokenizer_with_its_own_decode_keeps_it() -> None:
    from transformers import PreTrainedTokenizerBase

    class OwnDecode(PreTrainedTokenizerBase):
        def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
            return "own"

    tokenizer = OwnDecode.__new__(OwnDecode)
    assert plain_decode(tokenizer)([1], skip_special_tokens=True) == "own"


async def test_a_disconnect_while_no_piece_comes_ends_the_answer() -> None:
    closed = asyncio.Event()

    async def silent() -> AsyncIterator[Piece]:
        try:
            await asyncio.Event().wait()  # a long prefill: no piece yet
            yield Piece("x", None, 1)
        finally:
            closed.set()

    gone = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, gone.set)
    seen = [piece async for piece in until_gone(silent(), gone.wait)]
    assert seen == [] and closed.is_set()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_the_callers_own_cancellation_goes_through() -> None:
    async def silent() -> AsyncIterator[Piece]:
        await asyncio.Event().wait()
        yield Piece("x", None, 1)

    never = asyncio.Event()

    async def read() -> list[Piece]:
        return [piece async for piece in until_gone(silent(), never.wait)]

    task = asyncio.ensure_future(read())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
