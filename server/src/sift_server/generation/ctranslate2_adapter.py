"""An encoder-decoder generation model (madlad400, any T5-family translator) on
CTranslate2's ``Translator``: the reference server's engine for madlad400.

Its folder is a CTranslate2 model (``model.bin``, with the Hugging Face tokenizer
files beside it) or a transformers folder, converted once at float32 into the
artifact cache (adapters/_ctranslate2.py). The prompt is the encoder's input as the
model's tokenizer makes it (``</s>`` appended; madlad400 reads its target language
from a ``<2xx>`` tag at the start); the answer is decoded greedily, as the
reference's adapter does: sampling and grammars are refused with a 400 before
the engine sees the request. The context bounds the prompt alone: the answer is
the decoder's, bounded by ``max_new_tokens_cap``."""

from __future__ import annotations

import json

from sift_server.adapters._ctranslate2 import converted
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import LoadContext
from sift_server.errors import InvalidInput
from sift_server.generation.adapter import GenerationAdapter
from sift_server.generation.ctranslate2_engine import DEFAULT_MAX_BATCH_REQUESTS, CTranslate2Engine
from sift_server.generation.params import Limits

# The reference's madlad400 entry: 512 prompt tokens, 512 answer tokens.
DEFAULT_CONTEXT = 512
DEFAULT_MAX_NEW_TOKENS_CAP = 512
_ENCODER_DECODERS = frozenset({"t5", "mt5"})


class CTranslate2GenerationAdapter(GenerationAdapter):
    greedy_only = True
    grammar = False

    @classmethod
    def load(cls, ctx: LoadContext) -> CTranslate2GenerationAdapter:
        from transformers import AutoTokenizer

        if ctx.precision not in (None, "fp32"):
            raise UnservableModel(f"the ctranslate2 adapter runs at fp32 only, not {ctx.precision}")
        folder = ctx.path
        config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        model_type = config.get("model_type")
        if model_type is not None and model_type not in _ENCODER_DECODERS:
            raise UnservableModel(
                f"{folder} holds a {model_type} model; the ctranslate2 adapter serves T5-family models"
            )
        artifact = converted(folder, ctx.cache_dir, "seq2seq", threads=ctx.torch_threads)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if tokenizer.eos_token_id is None:
            raise UnservableModel(f"{folder}'s tokenizer names no end token")
        options = ctx.options
        context = ctx.max_sequence_length or int(options.get("context_tokens", DEFAULT_CONTEXT))
        limits = Limits(
            context_tokens=context,
            max_new_tokens_cap=int(options.get("max_new_tokens_cap", DEFAULT_MAX_NEW_TOKENS_CAP)),
            answer_in_context=False,
        )
        engine = CTranslate2Engine(
            artifact,
            tokens_of=lambda ids: list(tokenizer.convert_ids_to_tokens(ids)),
            end_id=int(tokenizer.eos_token_id),
            threads=ctx.torch_threads,
            max_batch_requests=int(options.get("max_batch_requests", DEFAULT_MAX_BATCH_REQUESTS)),
        )
        runtime = {"engine": "ctranslate2", "model": "Translator", "precision": "fp32"}
        return cls(tokenizer, engine, limits, runtime)

    def encode(self, text: str) -> list[int]:
        # The tokenizer makes ``</s>`` of an empty text: refuse it as the reference does.
        if not text:
            raise InvalidInput("The prompt is empty.", param="prompt")
        return super().encode(text)
