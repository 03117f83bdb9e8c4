"""The seam between Sift and the engine that decodes.

An engine takes a prompt's token ids and a :class:`Sampling`, and yields the
answer's token ids as it makes them, batching concurrent requests itself
(continuous batching, its own KV cache). On this CPU it is OpenVINO GenAI's
``ContinuousBatchingPipeline`` in a child process (engine_process.py; the choice and its
figures: docs/generation.md). On a GPU the same seam is where vLLM's
``AsyncLLMEngine`` goes (token ids in, token ids out, ``abort`` on cancel); it is
named here and in the docs, not built or tested (no GPU on the build machine)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from sift_server.generation.params import Sampling

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class Step:
    """Tokens the engine made since the last step; ``finish`` on the last one."""

    ids: tuple[int, ...]
    finish: FinishReason | None = None


class GenerationEngine(Protocol):
    def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncGenerator[Step, None]:
        """The answer's steps. Closing the iterator early (a client gone, a stop
        sequence met) cancels the request in the engine."""
        ...

    def memory_bytes(self) -> int: ...

    def close(self) -> None: ...
