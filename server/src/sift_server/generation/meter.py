"""Generations in flight: metered (``sift_generation_*``) and awaited at shutdown, so a
SIGTERM lets running streams finish within the grace period (core/state.py)."""

from __future__ import annotations

import asyncio
import contextlib

from sift_server.metrics import Metrics


class GenerationMeter:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        self.running = 0
        self._idle: asyncio.Event | None = None

    def started(self, model: str) -> None:
        self.running += 1
        if self._idle is not None:
            self._idle.clear()
        if self.metrics is not None:
            self.metrics.generation_started(model)

    def done(self, model: str, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.running -= 1
        if self.running == 0 and self._idle is not None:
            self._idle.set()
        if self.metrics is not None:
            self.metrics.generation_done(model, reason, prompt_tokens, completion_tokens)

    async def idle(self, timeout_s: float) -> bool:
        """Whether every generation ended within ``timeout_s``."""
        if self.running == 0:
            return True
        if self._idle is None:
            self._idle = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), max(0.0, timeout_s))
        return self.running == 0
