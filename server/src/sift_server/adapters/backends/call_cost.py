"""What one more runtime call costs a model, in tokens, measured on its loaded
runner: the ``call_cost`` that ``buckets.plan`` weighs against the padding a
split saves.

A call costs a fixed part (the runtime's dispatch over every node, the
framework's own overhead) plus a part per token, which is higher for small
matrices than for large ones. Both differ by orders of magnitude between a
hidden-64 test model and MiniLM and between backends, so no single constant
fits: the runner is timed on one batch of ``rows`` rows and on half of it,
each ``length`` tokens long. A token costs ``(t(full) - t(half))`` over the
tokens the half call lacks, the fixed part is what is left of ``t(half)``, and
their ratio is a split's price in tokens (measured at a small batch, so the
small matrices' lower rate counts as part of it). The least of several timings
of each shape is kept, in the process's CPU time rather than wall time: on a
shared core (other servers starting, the background ``auto`` decision) wall
time counts other processes' turns, and a split's price is CPU anyway. A fit
that finds no fixed part (noise) gives no answer, and the caller keeps a default.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Shape of the timed batches: big enough that a MiniLM-sized model's per-token
# part shows, small enough to cost about a tenth of a second at load (a first
# start with auto measures its PyTorch runner before it is ready).
ROWS = 4
LENGTH = 16
# Timed pairs: at least MIN_REPEATS, then more while the budget lasts (a tiny
# model's pair takes a millisecond, MiniLM's a tenth of a second).
MIN_REPEATS = 3
MAX_REPEATS = 30
BUDGET_S = 0.05
# The plan's search is linear in rows for any cost; a cost above a whole long
# batch means "never split" and is capped there.
MAX_CALL_COST = 4096


def from_timings(full_s: float, half_s: float, rows: int, length: int) -> int | None:
    """The call cost in tokens from the least time of a ``rows`` x ``length``
    call and of a ``rows // 2`` one; ``None`` when the timings do not fit the
    model (the half call not cheaper than the full one, or no fixed part left:
    every real call has one, so that is noise, and a cost of 0 would split a
    batch at every distinct length)."""
    half_rows = rows // 2
    per_token = (full_s - half_s) / ((rows - half_rows) * length)
    if per_token <= 0:
        return None
    fixed = half_s - per_token * half_rows * length
    if fixed <= 0:
        return None
    return min(MAX_CALL_COST, round(fixed / per_token))


def measure(
    run: Callable[[int, int], object],
    *,
    rows: int = ROWS,
    length: int = LENGTH,
    budget_s: float = BUDGET_S,
    clock: Callable[[], float] = time.process_time,
) -> int | None:
    """Time ``run(rows, length)`` (one runtime call on a batch of that shape)
    and ``run(rows // 2, length)`` in pairs, after one warm-up of each:
    ``MIN_REPEATS`` pairs, then more up to ``MAX_REPEATS`` while ``budget_s``
    lasts; return ``from_timings`` of the least times."""
    if rows < 2 or length < 1:
        raise ValueError("rows must be >= 2 and length >= 1")
    half = rows // 2
    run(rows, length)
    run(half, length)
    best_full = best_half = float("inf")
    began = clock()
    for done in range(MAX_REPEATS):
        if done >= MIN_REPEATS and clock() - began >= budget_s:
            break
        start = clock()
        run(rows, length)
        middle = clock()
        run(half, length)
        end = clock()
        best_full = min(best_full, middle - start)
        best_half = min(best_half, end - middle)
    return from_timings(best_full, best_half, rows, length)
