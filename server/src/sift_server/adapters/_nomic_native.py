"""Nomic BERT (nomic-embed-text-v1.5) on transformers' own ``NomicBertModel``, never the
folder's Python.

The published folder names the publisher's code in ``auto_map``
(``configuration_hf_nomic_bert.NomicBertConfig``, ``modeling_hf_nomic_bert.NomicBertModel``)
and keeps that code's config keys (``n_embd``, ``rotary_emb_fraction``, ...) and weight names
(``emb_ln``, ``encoder.layers.N.attn.Wqkv``, ``mlp.fc11``). Sift translates the config key by
key into transformers' ``NomicBertConfig`` and renames the weights as transformers'
conversion mapping for ``nomic_bert`` does (``Wqkv`` split into q, k, v). Whatever it cannot
translate exactly is refused at load with the key and the reason: an unknown key, a setting
the native class does not compute (biases, pre-norm, partial or interleaved or scaled rotary),
and non-zero attention dropout, which the publisher's attention applies even in eval mode
(it passes ``dropout_p`` to PyTorch), so such a checkpoint answers randomly there. Missing,
extra or differently shaped weights are refused too. docs/models.md, "Nomic".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters._refusal import UnservableModel

if TYPE_CHECKING:
    import torch

PUBLISHER_CLASSES = {
    "AutoConfig": "configuration_hf_nomic_bert.NomicBertConfig",
    "AutoModel": "modeling_hf_nomic_bert.NomicBertModel",
}

# The publisher's config defaults (its NomicBertConfig over GPT2Config's), for keys a folder omits.
_DEFAULTS: dict[str, Any] = {
    "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None, "n_positions": 1024, "vocab_size": 50257,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "attn_pdrop": 0.1,
    "prenorm": False, "parallel_block": False, "parallel_block_tied_norm": False, "rotary_emb_fraction": 0.0,
    "qkv_proj_bias": True, "rotary_emb_base": 10_000, "rotary_emb_scale_base": None,
    "rotary_emb_interleaved": False, "mlp_fc1_bias": True, "mlp_fc2_bias": True, "use_rms_norm": False,
    "causal": False, "type_vocab_size": 2, "pad_vocab_size_multiple": 1, "rotary_scaling_factor": None,
    "rotary_head_dim": False, "norm_mlp": False, "num_heads_kv": None,
}  # fmt: skip

# Settings the native class computes one way only: the value it needs and what it means.
_REQUIRED: dict[str, tuple[object, str]] = {
    "activation_function": ("swiglu", "the native MLP is SwiGLU"),
    "prenorm": (False, "the native layers normalize after the residual"),
    "parallel_block": (False, "the native layers run attention then MLP"),
    "parallel_block_tied_norm": (False, "the native layers run attention then MLP"),
    "use_rms_norm": (False, "the native layers use LayerNorm"),
    "causal": (False, "the native attention is bidirectional"),
    "qkv_proj_bias": (False, "the native attention projections have no bias"),
    "mlp_fc1_bias": (False, "the native MLP has no bias"),
    "mlp_fc2_bias": (False, "the native MLP has no bias"),
    "rotary_emb_fraction": (1.0, "the native rotary embedding rotates the whole head"),
    "rotary_emb_interleaved": (False, "the native rotary embedding rotates halves, not interleaved pairs"),
    "rotary_emb_scale_base": (None, "the native rotary embedding has no xPos scaling"),
    "rotary_scaling_factor": (None, "the native rotary embedding has no dynamic NTK scaling"),
    "rotary_head_dim": (False, "the native rotary embedding runs over the sequence axis"),
    "norm_mlp": (False, "the native MLP has no inner LayerNorm"),
}

# Keys with no effect on the hidden states in eval mode: names, the publisher's kernel and
# training switches (fused kernels, flash attention, cross-entropy, dense output), dropout
# through nn.Dropout modules (off in eval in both implementations), the initializer, and
# GPT2Config's fields the publisher's code never reads.
_INERT = frozenset(
    {
        "_name_or_path", "architectures", "auto_map", "model_type", "transformers_version", "torch_dtype", "dtype",
        "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "use_cache", "initializer_range",
        "fused_bias_fc", "fused_dropout_add_ln", "use_flash_attn", "use_xentropy", "dense_seq_output",
        "max_trained_positions", "resid_pdrop", "embd_pdrop", "summary_first_dropout", "summary_activation",
        "summary_proj_to_labels", "summary_type", "summary_use_proj", "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_pooling_layer",
        "classifier_dropout", "id2label", "label2id", "problem_type",
    }
)  # fmt: skip

# max_position_embeddings and rope_parameters are transformers' own keys, which a config saved
# by transformers 5 carries beside the publisher's: the first is the trained length (the
# rotary positions run to n_positions either way), the second must say what rotary_emb_base says.
_TRANSLATED = frozenset(
    {"n_embd", "n_layer", "n_head", "n_inner", "n_positions", "vocab_size", "pad_vocab_size_multiple",
     "type_vocab_size", "layer_norm_epsilon", "rotary_emb_base", "attn_pdrop", "num_heads_kv",
     "max_position_embeddings", "rope_parameters"}
)  # fmt: skip

# transformers' conversion mapping for nomic_bert (conversion_mapping.py), in order.
_RENAMES = (
    (r"^encoder\.layers\.", "layers."),
    (r"^emb_ln\.", "embeddings.LayerNorm."),
    (r"\.attn\.out_proj\.", ".self_attn.o_proj."),
    (r"\.mlp\.fc11\.", ".mlp.up_proj."),
    (r"\.mlp\.fc12\.", ".mlp.gate_proj."),
    (r"\.mlp\.fc2\.", ".mlp.down_proj."),
    (r"\.norm1\.", ".post_attention_layernorm."),
    (r"\.norm2\.", ".post_mlp_layernorm."),
)
_WQKV = re.compile(r"^(layers\.\d+)\.attn\.Wqkv\.weight$")


def is_nomic_layout(config: Mapping[str, Any]) -> bool:
    """A folder in the published Nomic layout: model_type ``nomic_bert`` whose ``auto_map``
    names the publisher's config and model classes (from the folder or the publisher's repository)."""
    auto_map = config.get("auto_map") or {}
    if config.get("model_type") != "nomic_bert" or not isinstance(auto_map, Mapping):
        return False
    return all(str(auto_map.get(key, "")).split("--")[-1] == name for key, name in PUBLISHER_CLASSES.items())


def _fail(folder: Path, reason: str) -> UnservableModel:
    return UnservableModel(
        f"sentence-embedder cannot serve {folder} exactly on transformers' NomicBertModel: {reason}. "
        "Sift never runs the folder's own code for this layout (docs/models.md, 'Nomic')."
    )


def translate_config(config: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The publisher's config.json as ``NomicBertConfig`` keyword arguments, or a refusal."""
    unknown = sorted(set(config) - _INERT - _TRANSLATED - set(_REQUIRED))
    if unknown:
        raise _fail(folder, f"its config.json has keys Sift cannot translate exactly: {', '.join(unknown)}")
    values = {**_DEFAULTS, **config}
    for key, (needed, why) in _REQUIRED.items():
        if values[key] != needed:
            raise _fail(folder, f"its config sets {key} = {values[key]!r}; it must be {needed!r} ({why})")
    if values["attn_pdrop"] != 0:
        raise _fail(
            folder,
            f"its config sets attn_pdrop = {values['attn_pdrop']!r}; the publisher's attention applies that dropout "
            "even in eval mode, so its answers are random and no deterministic model equals them",
        )
    rope = {"rope_type": "default", "rope_theta": float(values["rotary_emb_base"])}
    given = values.get("rope_parameters")
    if given is not None and (not isinstance(given, Mapping) or dict(given) != rope):
        raise _fail(folder, f"its config sets rope_parameters = {given!r}; rotary_emb_base asks for {rope!r}")
    hidden, heads = int(values["n_embd"]), int(values["n_head"])
    if values["num_heads_kv"] not in (None, heads):
        raise _fail(
            folder,
            f"its config sets num_heads_kv = {values['num_heads_kv']!r}; the native attention has {heads} key heads",
        )
    if hidden % heads:
        raise _fail(folder, f"n_embd {hidden} is not a multiple of n_head {heads}")
    # The publisher's gated MLP: n_inner (else 8/3 of the width) rounded up to a multiple of 256.
    inner = values["n_inner"] if values["n_inner"] is not None else int(8 * hidden / 3)
    inner = (int(inner) + 255) // 256 * 256
    # The publisher pads the vocabulary to a multiple of pad_vocab_size_multiple.
    vocab, multiple = int(values["vocab_size"]), int(values["pad_vocab_size_multiple"])
    vocab += (multiple - vocab % multiple) % multiple
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": int(values["n_layer"]),
        "num_attention_heads": heads,
        "intermediate_size": inner,
        "hidden_act": "silu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        # The position buffers must cover every position the publisher's code accepts.
        "max_position_embeddings": max(int(values["n_positions"]), int(values.get("max_position_embeddings") or 0)),
        "type_vocab_size": int(values["type_vocab_size"]),
        "layer_norm_eps": float(values["layer_norm_epsilon"]),
        "rope_parameters": rope,
    }


def rename_weights(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The published weight names as transformers' ``NomicBertModel`` names them."""
    renamed: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        for pattern, replacement in _RENAMES:
            name = re.sub(pattern, replacement, name)
        qkv = _WQKV.match(name)
        if qkv:
            for part, chunk in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3, dim=0), strict=True):
                renamed[f"{qkv.group(1)}.self_attn.{part}.weight"] = chunk.contiguous()
        else:
            renamed[name] = tensor
    return renamed


def load_native(folder: Path) -> torch.nn.Module:
    """transformers' ``NomicBertModel`` with the folder's weights, checked one by one."""
    import json

    import torch
    from safetensors.torch import load_file
    from transformers import NomicBertConfig, NomicBertModel

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    kwargs = translate_config(config, folder)
    weights_file = folder / "model.safetensors"
    if not weights_file.is_file():
        raise _fail(folder, "it has no model.safetensors (Sift reads the published single safetensors file)")
    weights = rename_weights(load_file(str(weights_file)))
    model = NomicBertModel(NomicBertConfig(**kwargs))
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    if missing or extra:
        raise _fail(
            folder, f"its weights do not match the architecture (missing {missing[:5]}, unexpected {extra[:5]})"
        )
    wrong = [name for name, tensor in weights.items() if tuple(tensor.shape) != tuple(expected[name].shape)]
    if wrong:
        name = wrong[0]
        raise _fail(
            folder,
            f"weight {name} has shape {tuple(weights[name].shape)}, the config asks for {tuple(expected[name].shape)}",
        )
    with torch.no_grad():
        model.load_state_dict({name: tensor.to(torch.float32) for name, tensor in weights.items()}, strict=True)
    module: torch.nn.Module = model.eval()
    return module
