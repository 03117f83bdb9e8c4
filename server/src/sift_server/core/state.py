"""What the serving core shares across requests: settings, registry, limits, metrics, the
prep thread, and the process's readiness and drain flags."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import time
from dataclasses import dataclass, field

from sift_server.config import Settings
from sift_server.generation.meter import GenerationMeter
from sift_server.metrics import Metrics
from sift_server.registry.registry import Registry
from sift_server.service.common import Limits
from sift_server.service.prep import PrepThread


def runtime_instance_id() -> str:
    """64 lowercase hex, fixed for the process (the SDK checks the format)."""
    return hashlib.sha256(f"{os.getpid()}:{secrets.token_hex(16)}".encode()).hexdigest()


@dataclass(slots=True)
class ServerState:
    settings: Settings
    registry: Registry
    limits: Limits
    metrics: Metrics
    prep: PrepThread
    runtime_instance: str = field(default_factory=runtime_instance_id)
    ready: bool = False
    draining: bool = False
    # Generations in flight (generation/service.py meters them).
    generations: GenerationMeter = field(default_factory=GenerationMeter)

    def __post_init__(self) -> None:
        self.generations.metrics = self.metrics

    async def close(self, grace_s: float) -> None:
        """Shutdown: running generations finish within ``grace_s`` less a margin;
        those still running then are stopped (their models' engines closed: each
        stream ends with the SHUTTING_DOWN error event, in time to reach its
        client), the models' workers finish or fail what they hold within the
        rest, then the prep thread ends."""
        ends = time.monotonic() + grace_s
        margin = min(1.0, grace_s / 2)
        if not await self.generations.idle(grace_s - margin):
            running = [
                r.adapter
                for r in self.registry.records.values()
                if r.adapter is not None and "generate" in r.adapter.info.tasks
            ]
            await asyncio.gather(*(asyncio.to_thread(adapter.close) for adapter in running))
            await self.generations.idle(margin / 2)
        await self.registry.close(max(0.0, ends - time.monotonic()))
        self.prep.close()
