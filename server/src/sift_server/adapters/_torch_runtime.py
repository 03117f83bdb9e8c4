"""Shared torch set-up for adapters: threads and inference mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Tokenizers without a real limit report a huge sentinel model_max_length.
UNBOUNDED_LENGTH = 1_000_000


def configure_threads(threads: int) -> None:
    # Small machines: more intra-op threads than cores only adds contention.
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def module_bytes(module: torch.nn.Module) -> int:
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    return int(params + buffers)


def release_module(module: torch.nn.Module, device: torch.device) -> None:
    """Drop a module's weights now (on eviction) rather than when its last
    reference goes away: move them to the meta device, and give a GPU's cache back."""
    torch.nn.Module.to(module, "meta")
    if device.type == "cuda":
        torch.cuda.empty_cache()


def select_device(options: Mapping[str, Any]) -> torch.device:
    """The catalog's ``device`` option, else the GPU when there is one."""
    name = options.get("device")
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(str(name))


def tokenizer_limit(tokenizer: PreTrainedTokenizerBase, *others: int | None) -> int:
    """The smallest positive limit among the tokenizer's and ``others``."""
    limits = [int(x) for x in others if x]
    if 0 < tokenizer.model_max_length < UNBOUNDED_LENGTH:
        limits.append(int(tokenizer.model_max_length))
    return min(limits) if limits else 512
