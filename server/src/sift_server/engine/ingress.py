"""Ingress signals of one model: requests whose headers arrived but that are
not admitted yet, and their arrival times (fed to the arrival model).

Cheap enough to leave on: two integer updates and one float comparison per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sift_server.engine.arrivals import ArrivalModel


@dataclass(slots=True)
class IngressTicket:
    """One request between header arrival and admission; ends exactly once."""

    arrival: float
    board: IngressBoard
    open: bool = True

    def end(self) -> None:
        if self.open:
            self.open = False
            self.board._ended()


@dataclass(slots=True)
class IngressBoard:
    arrivals: ArrivalModel = field(default_factory=ArrivalModel)
    pending: int = 0
    # Called when the count drops, so a worker holding a head can re-decide.
    on_change: Callable[[], None] | None = None
    # Whether the model has queued or running work (set by the worker).
    has_work: Callable[[], bool] = lambda: False

    def begin(self, now: float) -> IngressTicket:
        self.arrivals.observe(now, in_flight=self.pending > 0 or self.has_work())
        self.pending += 1
        return IngressTicket(now, self)

    def _ended(self) -> None:
        self.pending -= 1
        if self.on_change is not None:
            self.on_change()
