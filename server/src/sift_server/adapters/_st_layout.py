"""What a model folder in the sentence-transformers layout asks for, read from
its JSON files alone (no torch, no transformers): the module stack, the pooling
mode, the prompts, the tokenizer's padding side and whether the network is a
decoder. The embedders compare it with what they compute and refuse the rest
(``_refusal.UnservableModel``), so a folder is never served other than as its
own library serves it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.repository_code import PinnedCode, check_repository_code

# sentence-transformers' Pooling config keys and the mode each one names.
POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}

# Decoder-only (causal) families, by config ``model_type``: a short list read from
# transformers' causal-LM table, kept here so the check imports nothing heavy.
DECODER_MODEL_TYPES = frozenset(
    {
        "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral", "gemma", "gemma2",
        "gemma3_text", "phi", "phi3", "gpt2", "gpt_neo", "gpt_neox", "gptj", "falcon", "olmo", "olmo2",
        "starcoder2", "stablelm", "cohere", "granite", "internlm2", "minicpm", "deepseek_v2", "deepseek_v3",
    }
)  # fmt: skip


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True)
class FolderLayout:
    folder: Path
    # Module class names in order (``Transformer``, ``Pooling``, ...); empty without modules.json.
    modules: tuple[str, ...] = ()
    transformer_path: str = ""
    pooling_modes: tuple[str, ...] = ()
    include_prompt: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    do_lower_case: bool = False
    max_seq_length: int | None = None
    padding_side: str = "right"
    model_type: str = ""
    is_decoder: bool = False
    hidden_size: int | None = None
    # config.json's auto_map: the architecture is repository code (trust_remote_code).
    auto_map: dict[str, Any] = field(default_factory=dict)

    @property
    def repository_code(self) -> bool:
        return bool(self.auto_map)

    def fail(self, adapter: str, reason: str, hint: str = "") -> UnservableModel:
        text = f"{adapter} cannot serve {self.folder} exactly: {reason}"
        return UnservableModel(f"{text}. {hint}" if hint else f"{text}.")


def _pooling_modes(config: dict[str, Any]) -> tuple[str, ...]:
    named = config.get("pooling_mode")
    if isinstance(named, str):
        return (named,)
    if isinstance(named, list):
        return tuple(str(mode) for mode in named)
    return tuple(mode for key, mode in POOLING_KEYS.items() if config.get(key))


def _is_decoder(config: dict[str, Any]) -> bool:
    architectures = config.get("architectures") or []
    return bool(
        config.get("is_decoder")
        or config.get("model_type") in DECODER_MODEL_TYPES
        or any(str(name).endswith(("ForCausalLM", "LMHeadModel")) for name in architectures)
    )


def read_layout(folder: Path) -> FolderLayout:
    modules_json = folder / "modules.json"
    entries = json.loads(modules_json.read_text(encoding="utf-8")) if modules_json.is_file() else []
    modules = tuple(str(entry.get("type", "")).rsplit(".", 1)[-1] for entry in entries)
    transformer_path = next(
        (str(entry.get("path", "")) for entry, name in zip(entries, modules, strict=True) if name == "Transformer"),
        "",
    )
    pooling_path = next(
        (str(entry.get("path", "")) for entry, name in zip(entries, modules, strict=True) if name == "Pooling"),
        "1_Pooling",
    )
    pooling = read_json(folder / pooling_path / "config.json")
    st_config = read_json(folder / "config_sentence_transformers.json")
    bert_config = read_json(folder / "sentence_bert_config.json")
    config = read_json(folder / "config.json")
    prompts = st_config.get("prompts") or {}
    max_seq = bert_config.get("max_seq_length")
    hidden = config.get("hidden_size")
    return FolderLayout(
        folder=folder,
        modules=modules,
        transformer_path=transformer_path,
        pooling_modes=_pooling_modes(pooling),
        include_prompt=bool(pooling.get("include_prompt", True)),
        prompts={str(k): str(v) for k, v in prompts.items()} if isinstance(prompts, dict) else {},
        default_prompt_name=st_config.get("default_prompt_name") or None,
        do_lower_case=bool(bert_config.get("do_lower_case", False)),
        max_seq_length=int(max_seq) if isinstance(max_seq, int) else None,
        padding_side=str(read_json(folder / "tokenizer_config.json").get("padding_side") or "right"),
        model_type=str(config.get("model_type") or ""),
        is_decoder=_is_decoder(config),
        hidden_size=int(hidden) if isinstance(hidden, int) else None,
        auto_map=dict(config.get("auto_map") or {}),
    )


def check_common(
    layout: FolderLayout, adapter: str, allowed_modules: tuple[str, ...], pinned: PinnedCode | None = None
) -> None:
    """What both embedders refuse alike: modules beyond ``allowed_modules`` (in that
    order), repository code the entry does not pin (``pinned``: None where the adapter
    never runs it), a transformer in a subfolder, lower-casing, a default prompt, and more
    than one pooling mode (sentence-transformers concatenates them)."""
    if layout.modules:
        expected = allowed_modules[: len(layout.modules)]
        if layout.modules != expected:
            raise layout.fail(
                adapter,
                f"its module stack is {list(layout.modules)}; this adapter runs {list(allowed_modules)} in that order",
            )
    if layout.repository_code and pinned is None:
        # transformers' own class for its model_type would load instead, and answer otherwise.
        raise layout.fail(
            adapter,
            "its config.json maps the architecture to repository code (auto_map), which this adapter does not run",
        )
    if layout.repository_code and pinned is not None:
        check_repository_code(layout.folder, adapter, layout.auto_map, pinned)
    if layout.transformer_path not in ("", "."):
        raise layout.fail(adapter, f"its transformer lives in the subfolder {layout.transformer_path!r}")
    if layout.do_lower_case:
        raise layout.fail(adapter, "sentence_bert_config.json sets do_lower_case, which this adapter does not apply")
    if layout.default_prompt_name:
        raise layout.fail(
            adapter,
            f"config_sentence_transformers.json sets default_prompt_name {layout.default_prompt_name!r}, "
            "a prompt the library adds to every text",
        )
    if len(layout.pooling_modes) > 1:
        raise layout.fail(adapter, f"its pooling concatenates more than one mode {list(layout.pooling_modes)}")
