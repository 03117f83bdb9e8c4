"""Token ids of plain ASCII text for BERT WordPiece tokenizers, without the library.

The ``tokenizers`` library spends most of a short sentence's time building offsets,
alignments and type ids the embedder never reads. For the BERT pipeline
(``BertNormalizer`` lowercasing, ``BertPreTokenizer``, ``WordPiece``, ``[CLS] $A
[SEP]``) the ids of printable ASCII text are a lowercase, a split into runs of
letters and digits and single punctuation marks, and a vocabulary lookup per word.
``WordPieceFastPath.ids`` gives those ids, or None for any text it does not cover
(non-ASCII, control characters other than tab and line breaks, an added token such
as ``[MASK]`` written in the text): the caller then asks the library. Parity with
the library is what tests/adapters/test_wordpiece.py checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Runs of ASCII letters and digits, or one punctuation mark: BertPreTokenizer on
# printable ASCII, where every other character is a space or ASCII punctuation.
_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 ]")
# Tab and line breaks are whitespace to the pre-tokenizer (and to clean_text).
_BREAKS = str.maketrans({"\t": " ", "\n": " ", "\r": " "})


class WordPieceFastPath:
    def __init__(
        self,
        vocab: Mapping[str, int],
        *,
        unk_id: int,
        prefix: str,
        max_word_chars: int,
        cls_id: int,
        sep_id: int,
        lowercase: bool,
        added: list[str],
    ) -> None:
        self._vocab = dict(vocab)
        self._get = self._vocab.get
        self._unk = unk_id
        self._prefix = prefix
        self._max_chars = max_word_chars
        self._cls = cls_id
        self._sep = sep_id
        self._lowercase = lowercase
        # Compared against the lowercased text: a case variant also sends it to the library.
        self._added = [token.lower() for token in added if token]
        self._word_ids: dict[str, list[int]] = {}

    def ids(self, text: str, max_length: int | None) -> list[int] | None:
        """``[CLS] word pieces [SEP]``, the pieces cut to ``max_length - 2``; None:
        not covered, ask the library."""
        if not text.isascii() or (max_length is not None and max_length < 3):
            return None
        if not text.isprintable():
            text = text.translate(_BREAKS)
            if not text.isprintable():
                return None
        lowered = text.lower()
        for token in self._added:
            if token in lowered:
                return None
        words = _WORDS.findall(lowered if self._lowercase else text)
        found = list(map(self._get, words))
        if None in found:
            pieces: list[int] = []
            for word, known in zip(words, found, strict=True):
                if known is None:
                    pieces.extend(self._pieces(word))
                else:
                    pieces.append(known)
        else:
            pieces = found  # type: ignore[assignment]
        if max_length is not None and len(pieces) > max_length - 2:
            del pieces[max(0, max_length - 2) :]
        pieces.insert(0, self._cls)
        pieces.append(self._sep)
        return pieces

    def _pieces(self, word: str) -> list[int]:
        """Greedy longest-match-first WordPiece of one word not in the vocabulary."""
        cached = self._word_ids.get(word)
        if cached is not None:
            return cached
        result = [self._unk]
        if len(word) <= self._max_chars:
            found: list[int] = []
            start = 0
            while start < len(word):
                end = len(word)
                current = None
                while start < end:
                    piece = word[start:end] if start == 0 else self._prefix + word[start:end]
                    current = self._get(piece)
                    if current is not None:
                        break
                    end -= 1
                if current is None:
                    break
                found.append(current)
                start = end
            else:
                result = found
        if len(self._word_ids) < 65_536:
            self._word_ids[word] = result
        return result


def fast_path(spec: Mapping[str, Any]) -> WordPieceFastPath | None:
    """The fast path for a parsed ``tokenizer.json``, or None when its pipeline is
    not exactly the BERT one this module reproduces."""
    normalizer = spec.get("normalizer") or {}
    model = spec.get("model") or {}
    if (
        normalizer.get("type") != "BertNormalizer"
        or (spec.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer"
    ):
        return None
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        return None
    vocab: dict[str, int] = model["vocab"]
    special = _cls_sep(spec.get("post_processor") or {})
    unk_id = vocab.get(model.get("unk_token", ""))
    if special is None or unk_id is None:
        return None
    max_chars = int(model.get("max_input_chars_per_word", 100))
    # A vocabulary word longer than the per-word limit would be [UNK] to the library.
    if any(len(word) > max_chars for word in vocab):
        return None
    return WordPieceFastPath(
        vocab,
        unk_id=unk_id,
        prefix=str(model.get("continuing_subword_prefix", "##")),
        max_word_chars=max_chars,
        cls_id=special[0],
        sep_id=special[1],
        lowercase=bool(normalizer.get("lowercase", True)),
        added=[str(token.get("content", "")) for token in spec.get("added_tokens") or []],
    )


def _cls_sep(processor: Mapping[str, Any]) -> tuple[int, int] | None:
    """The ids around a single sequence: ``[CLS] $A [SEP]`` only."""
    kind = processor.get("type")
    if kind == "BertProcessing":
        return int(processor["cls"][1]), int(processor["sep"][1])
    if kind != "TemplateProcessing":
        return None
    single = processor.get("single") or []
    if len(single) != 3 or "SpecialToken" not in single[0] or "Sequence" not in single[1]:
        return None
    if "SpecialToken" not in single[2] or single[1]["Sequence"].get("id") != "A":
        return None
    tokens = processor.get("special_tokens") or {}
    first = tokens.get(single[0]["SpecialToken"]["id"], {}).get("ids") or []
    last = tokens.get(single[2]["SpecialToken"]["id"], {}).get("ids") or []
    if len(first) != 1 or len(last) != 1:
        return None
    return int(first[0]), int(last[0])
