"""Token ids of texts for the embedder, read straight from ``tokenizer.json``
with the ``tokenizers`` library when the folder has one.

Importing transformers imports PyTorch (seconds, and hundreds of MiB): an
entry that runs on ONNX Runtime or OpenVINO then never needs either, which is
what keeps the default model's cold start short. A folder without
``tokenizer.json`` falls back to transformers' ``AutoTokenizer``.
The padding and truncation settings saved inside ``tokenizer.json`` are
ignored: Sift pads per batch and truncates to the entry's limit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pad_rows(
    rows: Sequence[Sequence[int]], pad_id: int, masks: Sequence[Sequence[int]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token rows padded to the longest with ``pad_id``, and their attention mask
    (int64, ``(len(rows), width)``): each row's own ``masks`` entry where given,
    else 1 over the row's tokens."""
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        if masks is None:
            mask[i, : len(row)] = 1
        else:
            mask[i, : len(masks[i])] = masks[i]
    return ids, mask


class TextTokenizer:
    """``ids(texts, max_length)``: special tokens added, truncated when a limit is given."""

    pad_token_id: int

    def ids(self, texts: Sequence[str], max_length: int | None) -> list[list[int]]:
        raise NotImplementedError


class RustTokenizer(TextTokenizer):
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._whole = Tokenizer.from_file(str(path))
        self._whole.no_padding()
        self._whole.no_truncation()
        self._cut: dict[int, Any] = {}
        self._path = path
        self.pad_token_id = _pad_id(path.parent, self._whole)

    def ids(self, texts: Sequence[str], max_length: int | None) -> list[list[int]]:
        # The ``_fast`` entry point skips the character offsets, which nothing here
        # reads: the same ids for about a fifth less CPU per short text.
        rows = [encoding.ids for encoding in self._whole.encode_batch_fast(list(texts), add_special_tokens=True)]
        if max_length is not None:
            # Truncation leaves a row that fits as it is: only the rows over the limit
            # are encoded again with it (cheaper than truncating every text).
            over = [i for i, row in enumerate(rows) if len(row) > max_length]
            if over:
                cut = self._truncating(max_length).encode_batch_fast([texts[i] for i in over], add_special_tokens=True)
                for i, encoding in zip(over, cut, strict=True):
                    rows[i] = encoding.ids
        return rows

    def _truncating(self, max_length: int) -> Any:
        tokenizer = self._cut.get(max_length)
        if tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self._path))
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length)
            self._cut[max_length] = tokenizer
        return tokenizer


class HfTokenizer(TextTokenizer):
    def __init__(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self.pad_token_id = int(self._tokenizer.pad_token_id or 0)

    def ids(self, texts: Sequence[str], max_length: int | None) -> list[list[int]]:
        if max_length is None:
            encoded = self._tokenizer(list(texts), add_special_tokens=True, truncation=False)
        else:
            encoded = self._tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length)
        result: list[list[int]] = encoded["input_ids"]
        return result


def load_tokenizer(folder: Path) -> TextTokenizer:
    path = folder / "tokenizer.json"
    return RustTokenizer(path) if path.is_file() else HfTokenizer(folder)


def _pad_id(folder: Path, tokenizer: Any) -> int:
    """The pad token's id as transformers would report it (0 when there is none)."""
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        token = json.loads(path.read_text(encoding="utf-8")).get("pad_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            found = tokenizer.token_to_id(token)
            if found is not None:
                return int(found)
    return 0
