"""A torch module to ONNX, with every input axis dynamic (a ``Graph``'s default export;
it takes the graph's parts, not the graph, so that this module depends on nothing of the seam)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def export_onnx(module: Any, inputs: Sequence[str], output: str, axes: Sequence[Sequence[str]], dest: Path) -> None:
    """Write ``dest/model.onnx`` from ``module``: ``inputs`` named as given, each with
    the named (dynamic) ``axes``, one output named ``output``."""
    import torch

    names = {name for per_input in axes for name in per_input}
    dims = {name: torch.export.Dim(name) for name in sorted(names)}
    # Traced at a small shape whose sizes differ per axis name (2, 3, 8...), so the
    # exporter cannot mistake two independent axes for one.
    sizes = {name: 2 + index for index, name in enumerate(sorted(names - {"seq"}))} | {"seq": 8}
    example = tuple(torch.ones(tuple(sizes[name] for name in per_input), dtype=torch.long) for per_input in axes)
    shapes = tuple({i: dims[name] for i, name in enumerate(per_input)} for per_input in axes)
    # The exporter's graph passes log every rewrite at INFO: keep the server log readable.
    quiet = [logging.getLogger(name) for name in ("onnx_ir", "onnxscript", "torch.onnx", "torch.export")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(
                module,
                example,
                str(dest / "model.onnx"),
                input_names=list(inputs),
                output_names=[output],
                dynamic_shapes=_dynamic_shapes(module, shapes),
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


def _dynamic_shapes(module: Any, shapes: tuple[dict[int, Any], ...]) -> tuple[Any, ...]:
    """One axes map per input; a ``forward(*tensors)`` takes them as one nested tuple."""
    parameters = inspect.signature(module.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return (shapes,)
    return shapes
