"""Rows of one forward grouped by length, so a runtime pads each group to its
own longest row instead of the whole batch to the longest of all.

A padded batch costs every row the longest row's tokens; on short, varied
inputs (a sentence plus the label markers: 24 to 41 tokens on the bench's
workload) a fifth of a batch's tokens are padding. An exported graph takes any
sequence length per call, so the runtime path sorts the rows by length and
runs consecutive groups, each cut to its own longest row. Every call also
costs a fixed amount (the runtime's dispatch, small matrices running below
their best rate), counted here in tokens: a group is split off only where the
padding it saves outweighs one more call. Outputs are per row and do not
depend on the padding (masked positions take no part), so the answer is the
padded batch's.

``plan`` is pure (lengths in, groups out); ``run_grouped`` is the thin loop
that cuts the inputs, calls the runner and puts the rows back in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

# One more runtime call costs about as much as this many padded tokens (ONNX
# Runtime and OpenVINO, one thread, MiniLM-sized encoder: docs/benchmarks/backends.md).
CALL_COST_TOKENS = 48
# A group never holds more rows than this: beyond it the matrices are already
# large enough, and the plan's search stays linear in the rows.
MAX_GROUP_ROWS = 32


def plan(lengths: Sequence[int], call_cost: int = CALL_COST_TOKENS, max_rows: int = MAX_GROUP_ROWS) -> list[list[int]]:
    """Row indices in groups of similar length, shortest first, minimising the
    padded tokens plus ``call_cost`` per group (an exact dynamic programme over
    the rows sorted by length, groups of at most ``max_rows`` consecutive rows)."""
    if call_cost < 0 or max_rows < 1:
        raise ValueError("call_cost must be >= 0 and max_rows >= 1")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    sorted_lengths = [lengths[i] for i in order]
    n = len(order)
    # best[j]: the least cost of the first j sorted rows; cut[j]: where its last group starts.
    best = [0] * (n + 1)
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = sorted_lengths[j - 1]  # sorted: the group's last row is its longest
        best[j], cut[j] = min((best[i] + call_cost + (j - i) * longest, i) for i in range(max(0, j - max_rows), j))
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    groups.reverse()
    return groups


def run_grouped(
    runner: Callable[[Mapping[str, np.ndarray]], np.ndarray],
    feed: Mapping[str, np.ndarray],
    mask: str,
    sequence_inputs: Sequence[str],
    call_cost: int | None = None,
) -> np.ndarray:
    """``runner(feed)``'s rows, computed group by group (``plan``) with every
    input in ``sequence_inputs`` cut to the group's longest row (``mask``'s sum);
    other inputs are taken row-wise whole. ``call_cost`` defaults to ``CALL_COST_TOKENS``."""
    lengths = feed[mask].sum(axis=1)
    groups = plan([int(n) for n in lengths], CALL_COST_TOKENS if call_cost is None else call_cost)
    if len(groups) <= 1 and (not groups or int(lengths.max()) == feed[mask].shape[1]):
        return runner(feed)
    out: np.ndarray | None = None
    for group in groups:
        rows = np.asarray(group, dtype=np.intp)
        longest = int(lengths[rows].max())
        part = {
            name: np.ascontiguousarray(value[rows, :longest] if name in sequence_inputs else value[rows])
            for name, value in feed.items()
        }
        result = runner(part)
        if out is None:
            out = np.empty((len(lengths), *result.shape[1:]), dtype=result.dtype)
        out[rows] = result
    assert out is not None
    return out
