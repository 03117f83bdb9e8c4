"""Ingress signals of one model: requests whose headers arrived but that are
not admitted yet.

The HTTP layer opens a ticket when a request's headers arrive (``begin``) and
the request ends it exactly once (admitted, or refused before admission). The
count and the arrival times belong to the scheduler; this is only the
ticket-shaped handle the HTTP layer holds. Cheap enough to leave on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class IngressSink(Protocol):
    def header_arrived(self, now: float) -> None: ...

    def ingress_ended(self) -> None: ...


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


class IngressBoard:
    def __init__(self, sink: IngressSink, on_change: Callable[[], None] | None = None) -> None:
        self._sink = sink
        # Called when a ticket ends, so an engine holding a head can re-decide.
        self._on_change = on_change

    def begin(self, now: float) -> IngressTicket:
        self._sink.header_arrived(now)
        return IngressTicket(now, self)

    def _ended(self) -> None:
        self._sink.ingress_ended()
        if self._on_change is not None:
            self._on_change()
