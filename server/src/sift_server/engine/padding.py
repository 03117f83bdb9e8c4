"""How one batch is cut into sub-forwards of similar length.

Pure code. A text model pads every row of a forward to its longest one, so a
batch in arrival order (which bounds every request's wait, see
``engine.batch_queue``) that mixes one 250-token passage with seven 30-token
questions would cost 8 x 250 token slots instead of about 460. Running such a
batch as two forwards, the short rows together and the long one alone, costs
one more forward's fixed part instead. The cut is chosen to minimise

    sum over sub-forwards of (rows x longest row + fixed_tokens)

where ``fixed_tokens`` is the fixed part of a forward expressed in tokens
(``engine.forward_cost``: fixed seconds / seconds per token). Items are sorted
by length and grouped into length classes (each at most ``class_growth``
times the shortest in it), and the best cut between classes is found by
dynamic programming over those few classes, so planning a forward of hundreds
of items costs microseconds.

Which request waits how long is decided before this, by the batch queue: the
cut never delays anything past the batch it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence


def padded_tokens(costs: Sequence[int]) -> int:
    """Token slots of one forward over rows of these lengths."""
    return len(costs) * max(costs) if costs else 0


def plan(costs: Sequence[int], fixed_tokens: float | None, class_growth: float = 1.25) -> list[list[int]]:
    """Indices into ``costs``, one list per sub-forward (shortest first).
    A single sub-forward in the original order when the cut would not pay or
    the fixed part is unknown."""
    whole = list(range(len(costs)))
    if fixed_tokens is None or len(costs) < 2:
        return [whole]
    order = sorted(whole, key=lambda i: costs[i])
    classes: list[list[int]] = []
    for index in order:
        if classes and costs[index] <= costs[classes[-1][0]] * class_growth:
            classes[-1].append(index)
        else:
            classes.append([index])
    if len(classes) == 1:
        return [whole]
    # best[j]: least cost of the first j classes; cut[j]: where its last sub-forward starts.
    best = [0.0] + [float("inf")] * len(classes)
    cut = [0] * (len(classes) + 1)
    for j in range(1, len(classes) + 1):
        longest = costs[classes[j - 1][-1]]
        rows = 0
        for i in range(j, 0, -1):
            rows += len(classes[i - 1])
            total = best[i - 1] + rows * longest + fixed_tokens
            if total < best[j]:
                best[j], cut[j] = total, i - 1
    if best[-1] >= padded_tokens(costs) + fixed_tokens:
        return [whole]
    groups: list[list[int]] = []
    j = len(classes)
    while j > 0:
        i = cut[j]
        groups.append([index for c in classes[i:j] for index in c])
        j = i
    groups.reverse()
    return groups


def within(group: Sequence[int], costs: Sequence[int], budget: int) -> list[list[int]]:
    """``group`` (indices into ``costs``) cut, in its order, into consecutive
    pieces of at most ``budget`` token slots each (a row longer than the budget
    runs alone): the efficient size of a forward on this model, which a large
    batch of independent users' requests keeps per sub-forward."""
    pieces: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in group:
        width = max(longest, costs[index])
        if current and (len(current) + 1) * width > budget:
            pieces.append(current)
            current, width = [], costs[index]
        current.append(index)
        longest = width
    if current:
        pieces.append(current)
    return pieces
