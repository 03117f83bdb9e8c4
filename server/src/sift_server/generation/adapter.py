"""A generation model as the registry knows every model: an :class:`Adapter` that
loads (so it counts in the memory budget, is listed in ``/v1/models`` and can be
evicted), holding the model's tokenizer and its :class:`GenerationEngine`.

Its folder is an OpenVINO IR export of a Hugging Face causal LM
(``optimum-cli export openvino --task text-generation-with-past``, or optimum-intel's
``main_export``): ``openvino_model.xml``/``.bin`` for the engine, the Hugging Face
tokenizer files and ``config.json`` for Sift. The batching engine's ``prepare`` and
``forward`` are not used: the generation engine batches itself."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InvalidInput
from sift_server.generation.engine import GenerationEngine
from sift_server.generation.params import Limits

DEFAULT_MAX_NEW_TOKENS_CAP = 4096
DEFAULT_KV_CACHE_GIB = 1.0
DEFAULT_MAX_SEQUENCES = 32
# The engine's child process runs this much below the server (catalog option engine_nice):
# below the forward threads (engine.model_engine.SERVING_FORWARD_NICE, 10), so a step gives way
# to an encode's forward on a shared core. At 10 (an even share) an encode beside a generation
# came out at the bar's edge, at 19 well within it; 19 slows the generation behind any other
# busy process on the machine (docs/generation.md, "Encode latency during a long generation").
DEFAULT_ENGINE_NICE = 19


def plain_decode(tokenizer: Any) -> Any:
    """The tokenizer's ``decode`` for a plain list of ids. transformers' public ``decode``
    first walks the ids in Python to convert tensors and arrays (``to_py_obj``), then calls
    ``_decode``; the answer's text is decoded whole at every step, and that walk was over a
    third of the decoding's cost. Where the tokenizer keeps the base class's ``decode`` (so
    ``_decode`` is all that follows for a list), ``_decode`` is called directly: the same
    text (tests/generation/test_text_and_params.py checks it); else the public one."""
    from transformers import PreTrainedTokenizerBase

    direct = getattr(tokenizer, "_decode", None)
    if direct is not None and type(tokenizer).decode is PreTrainedTokenizerBase.decode:
        return direct
    return tokenizer.decode


class GenerationAdapter(Adapter):
    transformers_models = False
    loads_runtime_without_torch = True
    # What its engine can do beyond greedy decoding (checked before the engine sees a request).
    greedy_only = False
    grammar = True

    def __init__(self, tokenizer: Any, engine: GenerationEngine, limits: Limits, runtime: Mapping[str, Any]) -> None:
        self.tokenizer = tokenizer
        self._decode = plain_decode(tokenizer)
        self.engine = engine
        self.limits = limits
        self.info = AdapterInfo(
            tasks=frozenset({"generate"}),
            outputs=("text",),
            max_sequence_length=limits.context_tokens,
            runtime=runtime,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GenerationAdapter:
        from transformers import AutoTokenizer

        from sift_server.generation.engine_process import EngineConfig, ProcessEngine

        folder = ctx.path
        if importlib.util.find_spec("openvino_genai") is None:
            # The engine imports it in its own process: say so here, as a missing dependency.
            raise ImportError("openvino-genai is not installed: pip install 'sift-server[generation]'")
        if not (folder / "openvino_model.xml").exists():
            raise ValueError(
                f"{folder} holds no openvino_model.xml: export the model with "
                "'optimum-cli export openvino --task text-generation-with-past' first"
            )
        config = json.loads((folder / "config.json").read_text())
        context = ctx.max_sequence_length or int(config.get("max_position_embeddings", 2048))
        options = ctx.options
        limits = Limits(
            context_tokens=context,
            max_new_tokens_cap=int(options.get("max_new_tokens_cap", DEFAULT_MAX_NEW_TOKENS_CAP)),
        )
        tokenizer = AutoTokenizer.from_pretrained(folder)
        nice = options.get("engine_nice", DEFAULT_ENGINE_NICE)
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise ValueError(f"catalog option engine_nice must be a whole number from 0 to 19, not {nice!r}")
        engine = ProcessEngine(
            EngineConfig(
                folder,
                threads=ctx.torch_threads,
                kv_cache_gib=float(options.get("kv_cache_gib", DEFAULT_KV_CACHE_GIB)),
                max_sequences=int(options.get("max_sequences", DEFAULT_MAX_SEQUENCES)),
                nice=nice,
            )
        )
        runtime = {"engine": "openvino-genai", "pipeline": "ContinuousBatchingPipeline", "precision": "fp32"}
        return cls(tokenizer, engine, limits, runtime)

    # ---- tokens --------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """A raw prompt's ids, as the model's tokenizer makes them (no chat template)."""
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def chat_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The messages rendered by the model's own chat template, ready for the answer."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidInput("This model has no chat template; use /v1/completions or /v1/generate.")
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._decode(list(ids), skip_special_tokens=True))

    # ---- the adapter contract --------------------------------------------------

    def prepare(self, task: TaskInput) -> Prepared:
        raise InvalidInput("A generation model serves the generation routes only.")

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        raise InvalidInput("A generation model serves the generation routes only.")

    def memory_bytes(self) -> int:
        return self.engine.memory_bytes()

    def close(self) -> None:
        self.engine.close()
