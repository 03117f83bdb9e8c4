"""The WordPiece fast path gives the ``tokenizers`` library's ids, or hands the text back."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from sift_server.adapters._tokenize import RustTokenizer
from sift_server.adapters._wordpiece import WordPieceFastPath, fast_path
from tests.fixtures.tiny_models import minilm_folder

# Words in and out of the vocabulary, pieces, digits, mixed case, punctuation runs.
WORDS = [
    "the", "Quick", "BROWN", "fox", "jumps", "unbelievably", "tokenization", "xylophonist",
    "qzxv", "covid19", "3.14", "e-mail", "don't", "U.S.A.", "#hash", "@user", "(paren)",
    "a_b", "~tilde~", "[", "]", "mask", "cls", "1234567",
    "z" * 104,  # over the per-word limit: [UNK]
]  # fmt: skip
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "", ",", "!"]
# One text in five gets one of these: the fast path must hand those back (or match).
EXOTIC = ["naïve", "café", "Ωmega", "日本", "\x0b", "\x00", "[MASK]", "[cls]", "\x7f"]


def library(path: Path, max_length: int | None) -> Any:
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if max_length is not None:
        tokenizer.enable_truncation(max_length)
    return tokenizer


@pytest.fixture(scope="module")
def bert() -> tuple[Path, WordPieceFastPath]:
    path = minilm_folder() / "tokenizer.json"
    fast = fast_path(json.loads(path.read_text(encoding="utf-8")))
    assert fast is not None
    return path, fast


def texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 60)):
            parts.append(rng.choice(WORDS))
            parts.append(rng.choice(SEPARATORS))
        if parts and rng.random() < 0.2:
            parts.insert(rng.randrange(len(parts)), rng.choice(EXOTIC))
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("max_length", [None, 3, 8, 32, 256])
def test_same_ids_as_the_library(bert: tuple[Path, WordPieceFastPath], max_length: int | None) -> None:
    path, fast = bert
    reference = library(path, max_length)
    covered = 0
    for text in texts(400, seed=max_length or 0):
        got = fast.ids(text, max_length)
        if got is None:
            continue
        covered += 1
        assert got == reference.encode(text).ids, text
    # Most texts are plain ASCII: the comparison ran on them, not only on hand-backs.
    assert covered > 100


def test_hands_back_what_it_does_not_cover(bert: tuple[Path, WordPieceFastPath]) -> None:
    _, fast = bert
    assert fast.ids("a naïve café", None) is None
    assert fast.ids("fill the [MASK] here", None) is None
    assert fast.ids("fill the [mask] here", None) is None
    assert fast.ids("bell\x07 rings", None) is None
    assert fast.ids("tab\tand\nlines", None) is not None


def test_other_pipelines_get_no_fast_path(bert: tuple[Path, WordPieceFastPath]) -> None:
    path, _ = bert
    spec = json.loads(path.read_text(encoding="utf-8"))
    assert fast_path({**spec, "pre_tokenizer": {"type": "Whitespace"}}) is None
    assert fast_path({**spec, "normalizer": {"type": "NFC"}}) is None
    assert fast_path({**spec, "post_processor": None}) is None
    assert fast_path({**spec, "model": {**spec["model"], "type": "BPE"}}) is None


def test_rust_tokenizer_mixes_both_paths_in_order() -> None:
    path = minilm_folder() / "tokenizer.json"
    tokenizer = RustTokenizer(path)
    batch = ["plain text here", "a naïve café", "fill the [MASK]", "more plain text, again!"]
    for max_length in (None, 5):
        expected = [encoding.ids for encoding in library(path, max_length).encode_batch(batch)]
        assert tokenizer.ids(batch, max_length) == expected
