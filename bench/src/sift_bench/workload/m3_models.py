"""A tiny random XLM-RoBERTa in the BGE-M3 layout, built offline with a fixed seed.

The folder is what FlagEmbedding's ``BGEM3FlagModel`` and the reference server read:
an ``XLMRobertaModel`` with its config, a tokenizer, and the two M3 heads as plain
PyTorch state dicts beside it: ``colbert_linear.pt`` (hidden -> hidden, one vector per
token) and ``sparse_linear.pt`` (hidden -> 1, one weight per token).

The tokenizer is a SentencePiece-style Unigram model written out by hand (XLM-R's
special tokens at XLM-R's ids: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then
single characters and a few whole words, ``<mask>`` last), with XLM-R's
``<s> A </s>`` template: no training, so two builds are byte-identical and the
recorded answers stay valid. Characters outside its alphabet read as ``<unk>``,
which BGE-M3's sparse output drops like the other special tokens.

The parity tests build the tiny one (``tests/fixtures/tiny_m3`` names it); the bench head and
the in-process benchmark build a MiniLM-sized one of the same layout (``build_minilm_m3``).
"""

from __future__ import annotations

import string
from pathlib import Path

M3_SEED = 33
HIDDEN = 16
WORDS = ("the", "capital", "of", "is", "china", "beijing", "what", "gravity", "force", "bodies", "sparse")


def _pieces() -> list[tuple[str, float]]:
    """(piece, log-probability) in id order after the four leading special tokens."""
    pieces: list[tuple[str, float]] = [("▁", -2.0)]
    pieces += [(f"▁{word}", -3.0) for word in WORDS]
    pieces += [(f"▁{word.capitalize()}", -3.5) for word in WORDS]
    for char in string.ascii_lowercase + string.ascii_uppercase + string.digits + ".,?!'-":
        pieces.append((char, -6.0))
        pieces.append((f"▁{char}", -6.5))
    return pieces


def vocab_size() -> int:
    return 4 + len(_pieces()) + 1


def build_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import XLMRobertaTokenizerFast

    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *_pieces(), ("<mask>", 0.0)]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace("  ", " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    fast = XLMRobertaTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=8192,
    )
    fast.save_pretrained(folder)
    return folder


def build_tiny_m3(folder: Path, *, max_positions: int = 130) -> Path:
    """The tiny BGE-M3 folder: positions for ``max_positions - 2`` tokens (XLM-R's
    positions start after the padding id)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(folder)
    torch.manual_seed(M3_SEED)
    config = XLMRobertaConfig(
        vocab_size=vocab_size(),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=0.2,
    )
    XLMRobertaModel(config).eval().save_pretrained(folder)
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    # Centred a little above zero, so that some tokens weigh nothing (ReLU) and most do not.
    torch.nn.init.normal_(sparse.weight, std=0.3)
    torch.nn.init.constant_(sparse.bias, 0.2)
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    return folder


MINILM_SEED = 0
MINILM_HIDDEN = 384
MINILM_LAYERS = 6


def build_minilm_m3(folder: Path, *, hidden: int = MINILM_HIDDEN, layers: int = MINILM_LAYERS) -> Path:
    """The BGE-M3 layout of ``build_tiny_m3`` with a random XLM-RoBERTa of all-MiniLM-L6-v2's
    size (hidden 384, 6 layers, 12 heads of 32, intermediate 1536, 512 positions) and its M3
    heads (tests pass a smaller ``hidden``, a multiple of 32, and fewer ``layers``)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    build_tiny_m3(folder, max_positions=514)
    torch.manual_seed(MINILM_SEED)
    config = XLMRobertaConfig(
        vocab_size=vocab_size(), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 32,
        intermediate_size=4 * hidden, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    XLMRobertaModel(config).eval().save_pretrained(folder)
    torch.save(torch.nn.Linear(hidden, hidden).state_dict(), folder / "colbert_linear.pt")
    torch.save(torch.nn.Linear(hidden, 1).state_dict(), folder / "sparse_linear.pt")
    return folder
