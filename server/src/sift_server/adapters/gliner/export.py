"""The span layer GLiNER's exported graph runs: markerV0 with its first matrix
product moved from spans to words.

markerV0 (gliner_small-v2.1's span mode) represents the span of words s..e as
``out_project(relu([start(s) ; end(e)]))``, where ``out_project`` is
Linear(2D -> 4D), ReLU, Linear(4D -> D), computed for every (word, width) pair:
12 spans per word at max width 12. The first Linear of a concatenation is the sum
of two Linears, one per half, and ``relu`` acts element by element, so

    Linear1(relu([a ; b])) = W_start relu(a) + W_end relu(b) + bias

and both terms depend on one word only. :class:`WordFactoredMarkerV0` computes
them once per word and gathers them per span, which removes two thirds of the
span layer's multiply-adds (the model's largest cost on short texts); the second
Linear still runs per span. Same weights, same function: the answers differ from
PyTorch's by float rounding only, which ``auto``'s probe and the parity tests
check like any export.

:func:`factored_span_layer` swaps it in for the duration of an export (the
PyTorch model that serves the ``torch`` backend is left as the library built it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

# Part of the exported graph's cache key: a graph exported before (or without) the
# factoring is not reused.
VERSION = "markerV0-word-factored-1"


class WordFactoredMarkerV0(nn.Module):
    """``SpanMarkerV0.forward`` with out_project's first Linear applied per word."""

    def __init__(self, marker: Any) -> None:
        super().__init__()
        self.max_width = int(marker.max_width)
        self.project_start: nn.Module = marker.project_start
        self.project_end: nn.Module = marker.project_end
        first, relu, dropout, second = marker.out_project
        self.first: nn.Linear = first
        self.relu: nn.Module = relu
        self.dropout: nn.Module = dropout
        self.second: nn.Module = second

    def forward(self, h: torch.Tensor, span_idx: torch.Tensor) -> torch.Tensor:
        batch, _, width = h.size()
        start = self.project_start(h).relu()
        end = self.project_end(h).relu()
        weight = self.first.weight  # [4D, 2D]: the start half, then the end half
        by_start = nn.functional.linear(start, weight[:, :width])
        by_end = nn.functional.linear(end, weight[:, width:], self.first.bias)
        hidden = _gather(by_start, span_idx[:, :, 0]) + _gather(by_end, span_idx[:, :, 1])
        out: torch.Tensor = self.second(self.dropout(self.relu(hidden)))
        return out.view(batch, span_idx.size(1) // self.max_width, self.max_width, width)


def _gather(rows: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``rows[b, indices[b, k]]`` for every b, k (the library's ``extract_elements``)."""
    return torch.gather(rows, 1, indices.unsqueeze(2).expand(-1, -1, rows.size(-1)))


def _marker_holder(model: Any) -> nn.Module | None:
    """The module whose ``span_rep_layer`` is a markerV0 layer, or None."""
    from gliner.modeling.span_rep import SpanMarkerV0

    layer = getattr(getattr(model, "model", None), "span_rep_layer", None)
    if layer is not None and isinstance(getattr(layer, "span_rep_layer", None), SpanMarkerV0):
        holder: nn.Module = layer
        return holder
    return None


@contextmanager
def factored_span_layer(model: Any) -> Iterator[bool]:
    """While open, ``model``'s markerV0 span layer (if it has one) is the
    word-factored one; yields whether it was swapped."""
    holder = _marker_holder(model)
    if holder is None:
        yield False
        return
    original = holder.span_rep_layer
    holder.span_rep_layer = WordFactoredMarkerV0(original)
    try:
        yield True
    finally:
        holder.span_rep_layer = original
