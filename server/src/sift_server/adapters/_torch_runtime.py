"""Shared torch set-up for adapters: threads and inference mode."""

from __future__ import annotations

import torch


def configure_threads(threads: int) -> None:
    # Small machines: more intra-op threads than cores only adds contention.
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def module_bytes(module: torch.nn.Module) -> int:
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    return int(params + buffers)
