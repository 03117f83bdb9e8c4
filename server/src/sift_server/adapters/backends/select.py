"""Where a model's forward runs, decided in one place: the plan a load follows
(what the entry asks for after the rules every entry obeys, and whether it
serves on the reference while ``auto`` decides in the background), and the one
call an adapter's ``load`` makes to open its backend (:func:`select`).

The layers above ``adapters/`` ask :func:`plan_load` and pass its answer on;
they never name a backend themselves."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from sift_server.adapters.backends.agreement import (
    DEFAULT_COSINE,
    DEFAULT_SCORE_RELATIVE,
    cosine_agreement,
    score_agreement,
)
from sift_server.adapters.backends.choice import Opener, choose_backend
from sift_server.adapters.backends.request import REFERENCE, Choice, request_for
from sift_server.adapters.backends.seam import Backend, Graph

if TYPE_CHECKING:
    from sift_server.adapters.base import LoadContext

log = logging.getLogger(__name__)

B = TypeVar("B", bound=Backend)
Out = TypeVar("Out")


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What one load of a catalog entry asks the adapter for."""

    backend: str
    precision: str | None
    # Served at once while ``auto`` decides in the background (None: this load is the only one).
    first: Choice | None = None
    # Why the entry's own backend was replaced, for the log (None: it was not).
    note: str | None = None

    @property
    def may_run_torch(self) -> bool:
        """PyTorch runs, or times the candidates (the loader imports transformers' model code first)."""
        return may_run_torch(self.backend)


def may_run_torch(backend: str) -> bool:
    """Whether a load asking for ``backend`` may run PyTorch (it is named, or ``auto``
    may choose it): such a load looks for a GPU, the others run on the CPU."""
    return backend in ("auto", REFERENCE.backend)


def plan_load(
    backend: str,
    precision: str | None,
    *,
    override: tuple[str | None, str | None],
    loras: bool,
    runs_on: Collection[str],
    repository_code: bool = False,
) -> LoadPlan:
    """The plan for an entry asking for ``backend``/``precision``.

    ``override`` (``sift serve --backend``) replaces both for every entry and
    leaves nothing to decide in the background. LoRA layers are injected into
    the PyTorch model: an entry with LoRAs runs on the reference. An ``auto``
    entry of an adapter that runs on more than one runtime (``runs_on``, its
    record's ``backends``) serves on the reference first. Pinned repository code runs on
    the reference too: an export would trace code Sift has not checked it can trace."""
    overridden = override[0] is not None
    if override[0] is not None:
        backend, precision = override[0], override[1]
    note = None
    if loras and (backend, precision) != (REFERENCE.backend, REFERENCE.precision):
        note = f"it has LoRA adapters: it runs on {REFERENCE.backend} {REFERENCE.precision}, not {backend}"
        backend, precision = REFERENCE.backend, REFERENCE.precision
    elif repository_code and (backend, precision) != (REFERENCE.backend, REFERENCE.precision):
        note = f"it runs pinned repository code: it runs on {REFERENCE.backend} {REFERENCE.precision}, not {backend}"
        backend, precision = REFERENCE.backend, REFERENCE.precision
    decides = not overridden and backend == "auto" and len(set(runs_on)) > 1
    return LoadPlan(backend, precision, REFERENCE if decides else None, note)


@dataclass(frozen=True, slots=True)
class Agreement(Generic[Out]):
    """How ``auto`` tells that a candidate's probe outputs agree with the
    reference's: a rule made for a tolerance, and the tolerance an entry gets
    when it names none."""

    default: float
    rule: Callable[[float], Callable[[Out, Out], tuple[bool, float]]]


# Embeddings: every probe row's cosine to the reference's.
COSINE: Agreement[np.ndarray] = Agreement(DEFAULT_COSINE, cosine_agreement)
# Scores and logits: each within a relative difference of the reference's.
SCORES: Agreement[np.ndarray] = Agreement(DEFAULT_SCORE_RELATIVE, score_agreement)


def select(
    ctx: LoadContext,
    graph: Graph,
    evaluate: Callable[[B], Out],
    agreement: Agreement[Out],
    opener: Opener[B],
    *,
    device: str = "cpu",
    probe_key: str = "",
    supported: Collection[Choice] | None = None,
    fp32_torch_only: bool = False,
) -> tuple[B, dict[str, Any]]:
    """Open ``graph`` where the load context asks (or where ``auto`` finds the
    fastest backend whose ``evaluate`` outputs agree with the reference's within
    the entry's tolerance, else ``agreement.default``). Returns the opened
    backend and its description for ``/v1/models``.

    ``opener`` opens one choice (``open_runner`` for a :class:`Runner`);
    ``supported`` narrows the candidates to what the adapter runs at all;
    ``fp32_torch_only``: the model's library runs PyTorch at fp32 only, so a
    reduced PyTorch precision asked for (``--backend torch:bf16``) becomes fp32."""
    backend, precision = ctx.backend, ctx.precision
    if fp32_torch_only and backend == REFERENCE.backend and precision not in (None, REFERENCE.precision):
        log.warning("%s runs PyTorch at fp32 only; ignoring precision %s", graph.kind, precision)
        precision = REFERENCE.precision
    request = request_for(ctx, device, backend=backend, precision=precision)
    tolerance = ctx.tolerance or agreement.default
    return choose_backend(
        graph,
        request,
        evaluate,
        agreement.rule(tolerance),
        tolerance,
        opener,
        supported=supported,
        probe_key=probe_key,
    )
