"""Tiny random Qwen3 models in the layouts of Qwen3-Embedding and Qwen3-Reranker,
built offline with fixed seeds.

The tokenizer is a byte-level BPE written out by hand (the 256 byte symbols, a
few merges so that ``yes`` and ``no`` are one token each, as in Qwen's own
vocabulary, and Qwen's special tokens): no training, so two builds are
byte-identical and the recorded reference answers stay valid.

The embedder folder is what sentence-transformers reads: ``modules.json``
(Transformer, Pooling, Normalize), ``1_Pooling/config.json`` with
``pooling_mode_lasttoken``, ``config_sentence_transformers.json`` with the
query prompt, and a tokenizer that pads on the left and appends
``<|endoftext|>`` to every text, as Qwen3-Embedding's does. The reranker folder
is a ``Qwen3ForCausalLM`` with the same tokenizer, without the appended token.

Two more layouts of the reference catalog's decoder families: a ``MistralModel`` embedder
in the sentence-transformers layout of Linq-Embed-Mistral, SFR-Embedding and e5-mistral
(last-token pooling, Normalize; a Llama-style tokenizer that prepends ``<s>`` and appends
nothing, so the reference appends ``</s>`` itself), and a ``Qwen2ForCausalLM`` reranker
with the Qwen-like tokenizer, as mxbai-rerank-v2 (answers ``1`` and ``0``).

The parity tests build the tiny ones (``tests/fixtures/tiny_decoder`` names them); the bench
heads and the in-process benchmarks build MiniLM-sized ones of the same layouts
(``build_minilm_qwen3_embedder``, ``build_minilm_qwen3_reranker``): random Qwen3s of
all-MiniLM-L6-v2's size (hidden 384, 6 layers, intermediate 1536, 6 query and 2 key/value
heads), so a forward costs what a MiniLM-sized model of the family costs. With the byte-level
tokenizer a text is about one token per character.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EMBEDDER_SEED = 31
RERANKER_SEED = 32
HIDDEN = 32
QUERY_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# Qwen3-Embedding's config_sentence_transformers.json "query" prompt.
QUERY_PROMPT = f"Instruct: {QUERY_INSTRUCTION}\nQuery:"
QUERY_TEMPLATE = "Instruct: {instruction}\nQuery:{text}"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen3 has these as added tokens that are not special (they appear in the reranker's suffix).
ADDED_TOKENS = ("<think>", "</think>")
MERGES = (("y", "e"), ("ye", "s"), ("n", "o"))
# The narrowest Matryoshka width the tiny embedder's catalog entry allows (its full width is HIDDEN).
MATRYOSHKA_MIN_DIM = 8


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table, in byte order (what ByteLevel pre-tokenizes to)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def build_tokenizer(folder: Path, *, append_eos: bool) -> Path:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {symbol: i for i, symbol in enumerate(_byte_symbols())}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    if append_eos:
        eos = tokenizer.token_to_id("<|endoftext|>")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>",
            pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", eos)],
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        padding_side="left",
        model_max_length=1024,
    )
    fast.save_pretrained(folder)
    return folder


def _qwen3_config(vocab_size: int) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=1024,
        initializer_range=0.2,
        tie_word_embeddings=True,
        pad_token_id=0,
    )


def _vocab_size() -> int:
    return 256 + len(MERGES) + len(SPECIAL_TOKENS) + len(ADDED_TOKENS)


def build_tiny_qwen3_embedder(folder: Path, *, max_seq_length: int = 512) -> Path:
    """A random Qwen3Model in the Qwen3-Embedding sentence-transformers layout."""
    import torch
    from transformers import Qwen3Model

    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(folder, append_eos=True)
    torch.manual_seed(EMBEDDER_SEED)
    config = _qwen3_config(_vocab_size())
    config.pad_token_id = json.loads((folder / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    Qwen3Model(config).eval().save_pretrained(folder)
    _write_last_token_layout(folder, max_seq_length)
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": QUERY_PROMPT, "document": ""}, "default_prompt_name": None})
    )
    return folder


def build_tiny_qwen3_reranker(folder: Path) -> Path:
    """A random Qwen3ForCausalLM with a Qwen-like tokenizer (the Qwen3-Reranker layout)."""
    import torch
    from transformers import Qwen3ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(folder, append_eos=False)
    torch.manual_seed(RERANKER_SEED)
    config = _qwen3_config(_vocab_size())
    config.pad_token_id = json.loads((folder / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    Qwen3ForCausalLM(config).eval().save_pretrained(folder)
    return folder


MISTRAL_SEED = 33
MXBAI_SEED = 34
MISTRAL_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# The query format of the reference catalog's Mistral-family entries (note the space after "Query:").
MISTRAL_QUERY_TEMPLATE = "Instruct: {instruction}\nQuery: {text}"


def build_llama_style_tokenizer(folder: Path) -> Path:
    """The byte-level vocabulary with Llama's special tokens: ``<s>`` before every text, no end token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {symbol: i for i, symbol in enumerate(_byte_symbols())}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in MISTRAL_SPECIAL_TOKENS])
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        padding_side="left",
        model_max_length=1024,
    )
    fast.save_pretrained(folder)
    return folder


def build_tiny_mistral_embedder(folder: Path, *, max_seq_length: int = 512) -> Path:
    """A random MistralModel in the Linq-Embed-Mistral / e5-mistral sentence-transformers layout."""
    import torch
    from transformers import MistralConfig, MistralModel

    folder.mkdir(parents=True, exist_ok=True)
    build_llama_style_tokenizer(folder)
    torch.manual_seed(MISTRAL_SEED)
    config = MistralConfig(
        vocab_size=256 + len(MERGES) + len(MISTRAL_SPECIAL_TOKENS),
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=1024,
        initializer_range=0.2,
        sliding_window=None,
        bos_token_id=256 + len(MERGES) + 1,
        eos_token_id=256 + len(MERGES) + 2,
    )
    MistralModel(config).eval().save_pretrained(folder)
    _write_last_token_layout(folder, max_seq_length)
    return folder


def _write_last_token_layout(folder: Path, max_seq_length: int) -> None:
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": HIDDEN, "pooling_mode_lasttoken": True, "include_prompt": True})
    )
    (folder / "2_Normalize").mkdir(exist_ok=True)


def build_tiny_mxbai_reranker(folder: Path) -> Path:
    """A random Qwen2ForCausalLM with the Qwen-like tokenizer (the mxbai-rerank-v2 layout)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(folder, append_eos=False)
    torch.manual_seed(MXBAI_SEED)
    config = Qwen2Config(
        vocab_size=_vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.2,
        tie_word_embeddings=True,
        pad_token_id=json.loads((folder / "tokenizer.json").read_text())["added_tokens"][0]["id"],
    )
    Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    return folder


# A Qwen3 of all-MiniLM-L6-v2's size (what the bench heads and the in-process benchmarks time).
MINILM_SEED = 0
MINILM_HIDDEN = 384
MINILM_LAYERS = 6


def _sized_qwen3_config(vocab_size: int, pad_token_id: int, hidden: int, layers: int, *, tie: bool) -> Any:
    """MiniLM's proportions at ``hidden`` (384: 6 query and 2 key/value heads of 64, intermediate 1536)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, pad_token_id=pad_token_id, hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=1024, tie_word_embeddings=tie,
    )  # fmt: skip


def build_minilm_qwen3_embedder(folder: Path, *, hidden: int = MINILM_HIDDEN, layers: int = MINILM_LAYERS) -> Path:
    """The Qwen3-Embedding layout of ``build_tiny_qwen3_embedder`` with a random Qwen3Model of
    MiniLM's size (tests pass a smaller ``hidden``, a multiple of 128, and fewer ``layers``)."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    build_tiny_qwen3_embedder(folder)
    small = Qwen3Config.from_pretrained(folder)
    torch.manual_seed(MINILM_SEED)
    config = _sized_qwen3_config(small.vocab_size, small.pad_token_id, hidden, layers, tie=False)
    Qwen3Model(config).eval().save_pretrained(folder)
    pooling = folder / "1_Pooling" / "config.json"
    layout = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**layout, "word_embedding_dimension": hidden}))
    return folder


def build_minilm_qwen3_reranker(folder: Path, *, hidden: int = MINILM_HIDDEN, layers: int = MINILM_LAYERS) -> Path:
    """The Qwen3-Reranker layout of ``build_tiny_qwen3_reranker`` with a random Qwen3ForCausalLM of
    MiniLM's size (tests pass a smaller ``hidden``, a multiple of 128, and fewer ``layers``)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    build_tiny_qwen3_reranker(folder)
    small = Qwen3Config.from_pretrained(folder)
    torch.manual_seed(MINILM_SEED)
    config = _sized_qwen3_config(small.vocab_size, small.pad_token_id, hidden, layers, tie=True)
    Qwen3ForCausalLM(config).eval().save_pretrained(folder)
    return folder
