"""``sift cluster``'s local scaler: the shell around cluster.scaler's policy.

Each tick reads the backlog of the workers' models from their consumers (the
signal KEDA reads in production), asks the policy how many workers to run, and
starts workers or retires the newest (SIGTERM: it drains). The clock is
injected; the policy decides, this only reads and acts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import nats

from sift_server.cluster.backlog import read_backlog
from sift_server.cluster.local import LocalCluster
from sift_server.cluster.scaler import ScalePolicy, ScaleState, wanted_workers

log = logging.getLogger(__name__)


class LocalScaler:
    def __init__(
        self,
        cluster: LocalCluster,
        models: Sequence[str],
        policy: ScalePolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.models = list(models)
        self.policy = policy
        self.clock = clock
        self.state = ScaleState(last_busy=clock())
        # One connection for every tick, on a loop of our own (the caller is synchronous).
        self._loop = asyncio.new_event_loop()
        self._nc = self._loop.run_until_complete(nats.connect(cluster.nats_url))

    def backlog(self) -> int:
        """Pending + in-flight messages of the workers' models (a missing consumer: none)."""

        async def read() -> int:
            js = self._nc.jetstream()
            total = 0
            for model in self.models:
                found = await read_backlog(js, model)
                total += found.total if found is not None else 0
            return total

        return self._loop.run_until_complete(read())

    def tick(self) -> int:
        """Read, decide, act; the number of workers wanted now."""
        self.cluster.reap()
        backlog = self.backlog()
        running = len(self.cluster.workers)
        wanted, self.state = wanted_workers(self.policy, self.state, running, backlog, self.clock())
        for _ in range(wanted - running):
            proc = self.cluster.start_worker()
            log.info("scaler: backlog %d, starting worker %s (%d -> %d)", backlog, proc.name, running, wanted)
        for _ in range(running - wanted):
            proc = self.cluster.retire_worker()
            log.info("scaler: idle, retiring worker %s (%d -> %d)", proc.name, running, wanted)
        return wanted

    def close(self) -> None:
        self._loop.run_until_complete(self._nc.close())
        self._loop.close()
