"""``auto``'s tolerance rules for array outputs: when a candidate's probe outputs
agree with PyTorch fp32's (each rule returns the verdict and the worst figure)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Agree = Callable[[np.ndarray, np.ndarray], tuple[bool, float]]

DEFAULT_COSINE = 0.9999
DEFAULT_SCORE_RELATIVE = 1e-3


def cosine_agreement(tolerance: float) -> Agree:
    """Rows agree when every row's cosine to the reference is at least ``tolerance``."""

    def agree(got: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
        a = got.astype(np.float64)
        b = expected.astype(np.float64)
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        cosines = (a * b).sum(axis=1) / np.maximum(norms, 1e-30)
        worst = float(cosines.min())
        return worst >= tolerance, worst

    return agree


def score_agreement(tolerance: float) -> Agree:
    """Scores agree when every ``|got - expected| <= tolerance * max(1, |expected|)``
    (relative to the score, absolute below 1 so logits near zero do not explode)."""

    def agree(got: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
        a = got.astype(np.float64).ravel()
        b = expected.astype(np.float64).ravel()
        worst = float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())
        return worst <= tolerance, worst

    return agree
