"""The word-factored markerV0 span layer GLiNER's exports run
(``adapters/gliner/export.py``): the library layer's function, swapped in only
while an export runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sift_server.adapters.gliner.export import WordFactoredMarkerV0, factored_span_layer


def marker_v0(hidden: int, max_width: int) -> Any:
    """The library's markerV0 layer. Imported here, not at the top: importing gliner pulls in
    transformers, ONNX and scikit-learn, and every pytest-xdist worker imports every test module
    while collecting, whether or not it runs this one."""
    from gliner.modeling.span_rep import SpanMarkerV0

    return SpanMarkerV0(hidden, max_width, dropout=0.0)


def spans(batch: int, words: int, max_width: int) -> torch.Tensor:
    """markerV0's span indices: for every word every width, clipped to the text."""
    pairs = [(start, min(start + width, words - 1)) for start in range(words) for width in range(max_width)]
    return torch.tensor(pairs).unsqueeze(0).expand(batch, -1, -1).contiguous()


@pytest.mark.parametrize(("hidden", "max_width", "words"), [(16, 4, 7), (32, 12, 20)])
def test_factored_layer_computes_the_librarys_span_representations(hidden: int, max_width: int, words: int) -> None:
    torch.manual_seed(0)
    marker = marker_v0(hidden, max_width).eval()
    h = torch.randn(3, words, hidden)
    index = spans(3, words, max_width)
    with torch.no_grad():
        expected = marker(h, index)
        got = WordFactoredMarkerV0(marker).eval()(h, index)
    assert got.shape == expected.shape == (3, words, max_width, hidden)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
    assert not torch.equal(expected, torch.zeros_like(expected))  # not vacuous


def test_the_swap_lasts_only_while_open() -> None:
    marker = marker_v0(16, 4)
    holder = SimpleNamespace(span_rep_layer=marker)
    model = SimpleNamespace(model=SimpleNamespace(span_rep_layer=holder))
    with factored_span_layer(model) as swapped:
        assert swapped and isinstance(holder.span_rep_layer, WordFactoredMarkerV0)
        assert holder.span_rep_layer.first is marker.out_project[0]  # the same weights, not a copy
    assert holder.span_rep_layer is marker
    with pytest.raises(RuntimeError), factored_span_layer(model):
        raise RuntimeError("an export that fails")
    assert holder.span_rep_layer is marker


def test_other_span_modes_are_left_alone() -> None:
    other = torch.nn.Linear(4, 4)
    model = SimpleNamespace(model=SimpleNamespace(span_rep_layer=SimpleNamespace(span_rep_layer=other)))
    with factored_span_layer(model) as swapped:
        assert not swapped and model.model.span_rep_layer.span_rep_layer is other
    with factored_span_layer(object()) as swapped:
        assert not swapped
