"""The multivector adapters' shared pieces: MaxSim and gathering each item's rows."""

from __future__ import annotations

import torch

from sift_server.adapters._multivector import joined_per_item, maxsim


def test_maxsim_sums_each_query_vectors_best_match() -> None:
    query = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    document = torch.tensor([[0.5, 0.1], [0.2, 0.9], [0.3, 0.3]])
    assert maxsim(query, document) == float(torch.tensor(0.5) + torch.tensor(0.9))
    assert maxsim(query, torch.zeros((0, 2))) == 0.0


def test_each_item_gets_its_own_rows_in_order() -> None:
    flat = [torch.full((n, 2), float(i)) for i, n in enumerate([1, 2, 3, 1])]
    first, second, third = joined_per_item(flat, [1, 2, 1])
    assert first is flat[0]
    assert torch.equal(second, torch.cat([flat[1], flat[2]]))
    assert second.shape == (5, 2)
    assert torch.equal(third, flat[3])
