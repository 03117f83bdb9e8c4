"""The choice: open the runner a request names, or let ``auto`` open every
candidate, keep those whose probe outputs agree with PyTorch fp32, time them
and keep the fastest, recording the decision so later starts reuse it.

An artifact cache that cannot take an export (the disk full, no writable
folder) never fails a load: the model serves on PyTorch fp32, the reference,
with a warning; a later start exports once there is room."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from sift_server.adapters.backends import artifacts
from sift_server.adapters.backends import request as vocabulary
from sift_server.adapters.backends import store as stores
from sift_server.adapters.backends.report import cpu_signature, summary
from sift_server.adapters.backends.request import REFERENCE, BackendRequest, Choice, candidates, is_explicit
from sift_server.adapters.backends.seam import Backend, Graph, Runner
from sift_server.adapters.backends.store import Artifacts
from sift_server.adapters.backends.timing import (
    NEAR_MARGIN,
    TIMING_METHOD,
    TIMING_ROUNDS,
    B,
    Clock,
    pick,
    time_rounds,
)

log = logging.getLogger(__name__)

PROBE_VERSION = "1"
# Decisions this process made afresh because it was asked to (``rechoose``), as
# (cache folder, decision key): a model evicted and loaded again later reuses the
# decision this process just recorded instead of timing on every reload.
_REDECIDED: set[tuple[str, str]] = set()
Evaluate = Callable[[Runner], np.ndarray]
Agree = Callable[[np.ndarray, np.ndarray], tuple[bool, float]]
# What a ``choose_backend`` caller's probe evaluation returns (an array, or e.g.
# GLiNER's entity spans).
Out = TypeVar("Out")
# Opens one choice of a graph, exporting through the store it is given.
Opener = Callable[[Graph, Choice, BackendRequest, Artifacts | None], B]


class NotDecided(LookupError):
    """A load asked for the recorded decision only (``recorded_only``) and none is
    recorded (or it no longer opens): the caller serves on the reference and has
    the decision made elsewhere."""


def choose(
    graph: Graph,
    request: BackendRequest,
    evaluate: Evaluate,
    agree: Agree,
    tolerance: float,
    probe_key: str = "",
    clock: Clock = time.perf_counter,
) -> tuple[Runner, dict[str, Any]]:
    """Open the runner the request names, or the fastest that agrees with torch fp32.

    ``probe_key`` names whatever else shapes ``evaluate``'s outputs (pooling,
    length limit): a recorded decision holds only for the same. Returns the
    runner and a description for ``/v1/models`` (backend, precision, how it was
    chosen and, for ``auto``, what each candidate measured)."""
    return choose_backend(graph, request, evaluate, agree, tolerance, open_runner, probe_key=probe_key, clock=clock)


def open_runner(graph: Graph, choice: Choice, request: BackendRequest, store: Artifacts | None) -> Runner:
    """The :class:`Runner` of ``choice`` (PyTorch, or the store's export on a runtime)."""
    # Looked up when called, not bound once: tests replace ``store.open_runner``.
    return stores.open_runner(graph, choice, request, store)


def choose_backend(
    graph: Graph,
    request: BackendRequest,
    evaluate: Callable[[B], Out],
    agree: Callable[[Out, Out], tuple[bool, float]],
    tolerance: float,
    opener: Opener[B],
    *,
    supported: Collection[Choice] | None = None,
    probe_key: str = "",
    clock: Clock = time.perf_counter,
) -> tuple[B, dict[str, Any]]:
    """``choose`` for any kind of :class:`Backend`: ``opener`` opens a choice
    (exports through the store it is given), ``evaluate`` runs the probe set on
    what it opened and ``agree`` compares that with torch fp32's. ``supported``
    narrows the candidates to what the adapter can run at all."""
    pool = [c for c in candidates(request) if vocabulary.available(c) and (supported is None or c in supported)]
    if not pool:
        if supported is not None and not any(c in supported for c in candidates(request)):
            raise ValueError(f"{graph.kind} does not run backend {request.backend} precision {request.precision}")
        raise ImportError(
            f"backend {request.backend} needs {vocabulary.LIBRARY.get(request.backend)}, which is not installed"
        )
    needs_store = any(c.backend != "torch" for c in pool)
    store: Artifacts | None = None
    cache: Path | None = None
    if needs_store:
        try:
            cache = artifacts.usable_cache_dir(request.cache_dir)
        except OSError as exc:  # not even a temporary folder can be written
            return _on_reference(graph, request, opener, supported, exc, "no folder for exports can be written")
        store = Artifacts(graph, cache, artifacts.content_hash(graph.folder, cache))
    if is_explicit(request) or len(pool) == 1:
        try:
            runner = opener(graph, pool[0], request, store)
        except Exception as exc:
            refused = artifacts.cannot_write(exc) if pool[0].backend != "torch" else None
            if refused is None:
                raise
            return _on_reference(
                graph, request, opener, supported, refused, f"the {pool[0]} export could not be written"
            )
        _drop_reference(graph, runner)
        return runner, {**runner.describe(), "selected_by": "catalog"}

    model_hash = store.model_hash if store is not None else artifacts.content_hash(graph.folder)
    decision_key = artifacts.artifact_key(
        {
            "model": model_hash,
            "graph": graph.kind,
            "candidates": [str(c) for c in pool],
            "threads": request.threads,
            "device": request.device,
            "cpu": cpu_signature(),
            "tolerance": tolerance,
            "probe": f"{PROBE_VERSION}:{probe_key}",
            "timing": TIMING_METHOD,
            "versions": artifacts.library_versions(),
        }
    )
    decisions = cache if cache is not None else artifacts.usable_cache_dir(request.cache_dir)
    cached = artifacts.read_decision(decisions, decision_key)
    redecide = (str(decisions), decision_key)
    if cached is not None and request.rechoose and redecide not in _REDECIDED:
        log.info("%s: deciding again as asked (recorded: %s)", graph.kind, cached.get("choice"))
        cached = None
    if cached is not None:
        known = {str(c): c for c in pool}
        choice = known.get(str(cached.get("choice")))
        if choice is not None:
            try:
                runner = opener(graph, choice, request, store)
            except Exception as exc:  # fall back to deciding again
                log.warning("%s: the recorded choice %s failed to open (%s); deciding again", graph.kind, choice, exc)
            else:
                _drop_reference(graph, runner)
                measured = cached.get("measured")
                measured = measured if isinstance(measured, dict) else {}
                timing = cached.get("timing")
                timing = timing if isinstance(timing, dict) else {}
                decided_at = cached.get("decided_at")
                log.info(
                    "%s; decided %s (SIFT_RECHOOSE_BACKEND=1 decides again)",
                    summary(graph.kind, choice, measured, timing),
                    decided_at or "earlier",
                )
                return runner, {
                    **runner.describe(),
                    "selected_by": "auto (recorded)",
                    "measured": measured,
                    "timing": timing,
                    "decided_at": decided_at,
                }

    if request.recorded_only:
        raise NotDecided(f"{graph.kind}: no recorded backend decision in {decisions}")
    runner, measured, timing = _decide(graph, request, pool, store, evaluate, agree, tolerance, clock, opener)
    # Wall-clock date for the operator reading /v1/models; the choice never depends on it.
    decided_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record = {"choice": str(runner.choice), "measured": measured, "timing": timing, "decided_at": decided_at}
    artifacts.write_decision(decisions, decision_key, record)
    if request.rechoose:
        _REDECIDED.add(redecide)
    _drop_reference(graph, runner)
    return runner, {
        **runner.describe(),
        "selected_by": "auto",
        "measured": measured,
        "timing": timing,
        "decided_at": decided_at,
    }


def _on_reference(
    graph: Graph,
    request: BackendRequest,
    opener: Opener[B],
    supported: Collection[Choice] | None,
    cause: OSError,
    what: str,
) -> tuple[B, dict[str, Any]]:
    """Serve on PyTorch fp32 because the artifact cache cannot take an export
    (``cause``); raises ``cause`` where the reference cannot run either."""
    if not vocabulary.available(REFERENCE) or (supported is not None and REFERENCE not in supported):
        raise cause
    log.warning(
        "%s: %s (%s: %s); serving on PyTorch %s instead (the reference's answers; a later start "
        "exports once the artifact cache %s has room and can be written)",
        graph.kind,
        what,
        type(cause).__name__,
        cause,
        REFERENCE.precision,
        request.cache_dir or artifacts.default_cache_dir(),
    )
    runner = opener(graph, REFERENCE, request, None)
    return runner, {**runner.describe(), "selected_by": f"fallback: {what}"}


def _decide(
    graph: Graph,
    request: BackendRequest,
    pool: Sequence[Choice],
    store: Artifacts | None,
    evaluate: Callable[[B], Out],
    agree: Callable[[Out, Out], tuple[bool, float]],
    tolerance: float,
    clock: Clock,
    opener: Opener[B],
) -> tuple[B, dict[str, Any], dict[str, Any]]:
    """Open every candidate, keep those within tolerance, time them in
    interleaved rounds and ``pick``; returns the chosen runner (the others
    closed), what each candidate measured, and how the timing was done."""
    log.info("%s: choosing a backend among %s (tolerance %g)", graph.kind, ", ".join(map(str, pool)), tolerance)
    reference = opener(graph, REFERENCE, request, store)
    # The reference outputs; this forward, like each candidate's agreement check
    # below, also warms its runner (first-call allocations, per-shape kernels)
    # before any timed sample.
    expected = evaluate(reference)
    passing: list[B] = [reference]
    # The reference against itself, on the rule's own scale (a cosine's 1.0, a difference's 0.0).
    _, itself = agree(expected, expected)
    measured: dict[str, Any] = {str(REFERENCE): {"agreement": round(float(itself), 8), "passed": True}}
    for choice in pool:
        if choice == REFERENCE:
            continue
        try:
            runner = opener(graph, choice, request, store)
        except Exception as exc:  # one backend failing must not stop the load
            log.warning("%s: backend %s could not be opened: %s", graph.kind, choice, exc)
            measured[str(choice)] = {"error": f"{type(exc).__name__}: {exc}"[:300], "passed": False}
            continue
        if runner.effective_precision != choice.precision:
            # e.g. OpenVINO on a CPU without bf16: the same as a candidate already measured.
            measured[str(choice)] = {"passed": False, "note": f"runs as {runner.effective_precision}"}
            runner.close()
            continue
        ok, agreement = agree(evaluate(runner), expected)
        measured[str(choice)] = {"agreement": round(float(agreement), 8), "passed": ok}
        if ok:
            passing.append(runner)
        else:
            runner.close()
    # The reference is a candidate only where the request allows it (``backend:
    # openvino`` without a precision chooses among OpenVINO's precisions; torch fp32
    # only checks their answers). None of the allowed ones agreeing: the reference.
    contenders = [r for r in passing if r.choice in pool] or [reference]
    # All contenders stay open through the rounds (that is what interleaving
    # needs): on a CPU that is up to four copies of the model at once, briefly.
    rounds = TIMING_ROUNDS if len(contenders) > 1 else 0  # one candidate: nothing to compare
    samples = time_rounds(contenders, evaluate, rounds, clock)
    timing: dict[str, Any] = {"rounds": rounds, "statistic": "median", "margin": NEAR_MARGIN, "tolerance": tolerance}
    if rounds:
        verdict = pick(samples, pool, NEAR_MARGIN)
        chosen = next(r for r in contenders if r.choice == verdict.choice)
        timing["fastest"] = str(verdict.fastest)
        for choice, values in samples.items():
            measured[str(choice)]["seconds"] = round(verdict.medians[choice], 6)
            measured[str(choice)]["samples"] = [round(v, 6) for v in values]
    else:
        chosen = contenders[0]
    for runner in passing:
        if runner is not chosen:
            runner.close()
    log.info("%s", summary(graph.kind, chosen.choice, measured, timing))
    return chosen, measured, timing


def _drop_reference(graph: Graph, runner: Backend) -> None:
    if runner.choice.backend != "torch":
        graph.release()
