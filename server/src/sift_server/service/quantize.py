"""Output dtypes of dense vectors, as the contract labels them (API.md §2.2)."""

from __future__ import annotations

import numpy as np

OUTPUT_DTYPES = ("float32", "float16", "int8", "uint8", "binary", "ubinary")


def quantize(vector: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """Return the converted vector and its wire label."""
    if dtype == "float32":
        return vector.astype(np.float32, copy=False), "float32"
    if dtype == "float16":
        return vector.astype(np.float16), "float16"
    if dtype == "int8":
        # Symmetric per row: the largest magnitude maps to ±127.
        peak = float(np.max(np.abs(vector))) or 1.0
        return np.clip(np.rint(vector * (127.0 / peak)), -127, 127).astype(np.int8), "int8"
    if dtype == "uint8":
        low, high = float(vector.min()), float(vector.max())
        span = (high - low) or 1.0
        return np.rint((vector - low) * (255.0 / span)).astype(np.uint8), "uint8"
    if dtype in ("binary", "ubinary"):
        # One bit per dimension, set when > 0, MSB first (numpy packbits).
        return np.packbits(vector > 0), "binary"
    raise ValueError(dtype)


def quantize_rows(matrix: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """A 2-D array (one vector per token) row by row; binary packs the last axis."""
    if dtype in ("float32", "float16"):
        return quantize(matrix, dtype)
    rows = [quantize(row, dtype) for row in matrix]
    label = rows[0][1] if rows else ("binary" if dtype == "ubinary" else dtype)
    width = rows[0][0].shape[0] if rows else 0
    out = np.stack([r for r, _ in rows]) if rows else np.zeros((0, width), dtype=np.uint8)
    return out, label
