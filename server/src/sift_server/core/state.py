"""What the serving core shares across requests: settings, registry, limits, metrics, the
prep thread, and the process's readiness and drain flags."""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field

from sift_server.config import Settings
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

    async def close(self, grace_s: float) -> None:
        """Shutdown: the models' workers finish or fail what they hold within
        ``grace_s``, then the prep thread ends."""
        await self.registry.close(grace_s)
        self.prep.close()
