"""The child process that runs a GLiNER2 2.x checkpoint with ``gliner2`` 2.0.0.

Sift's environment holds ``gliner2`` 1.3.2 (the reference's release for the
GLiNER2 v1 models; 2.x answers those differently), so the 2.x release lives in
a side folder (``scripts/bootstrap.sh`` installs it there) that only this child
puts first on its import path. The parent (``adapters/gliner2_v2.py``) sends
``(texts, labels, threshold)`` and gets back per text the library's own answer
of ``batch_extract_entities`` and the encoded row's token counts.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any

# The release the reference server's GLiNER2 2.x bundle pins (its answers are the parity target).
GLINER2_V2_VERSION = "2.0.0"


def _load(side_path: str, model_path: str, threads: int) -> Any:
    sys.path.insert(0, side_path)
    import gliner2

    if gliner2.__file__ is None or not gliner2.__file__.startswith(side_path):
        raise RuntimeError(f"gliner2 came from {gliner2.__file__}, not the side install {side_path}")
    if gliner2.__version__ != GLINER2_V2_VERSION:
        raise RuntimeError(f"the side install holds gliner2 {gliner2.__version__}, not {GLINER2_V2_VERSION}")
    import torch
    from gliner2 import AutoExtractor

    if threads > 0:  # 0: torch's own default
        torch.set_num_threads(threads)
    model = AutoExtractor.from_pretrained(model_path, map_location="cpu", quantize=False)
    if getattr(model, "architecture", None) not in ("span", "boundary"):
        raise RuntimeError("not a GLiNER2 2.x span or boundary checkpoint")
    model.processor.change_mode(is_training=False)
    model.eval()
    return model


def _row_tokens(model: Any, text: str, schema: Any) -> tuple[int, int]:
    """(encoded row tokens, of which the document's), as the library's processor builds the row."""
    batch = model.processor.collate_fn_inference(
        [(text, schema)], max_len=None, error_policy="raise", architecture=model.architecture
    )
    mappings = batch.mapped_indices[0]
    return int(batch.original_lengths[0]), sum(1 for mapping in mappings if mapping[0] == "text")


def entities(model: Any, texts: list[str], labels: list[str], threshold: float) -> list[dict[str, Any]]:
    """The library's answer per text, with its row's token counts."""
    import torch

    schema = model.create_schema().entities(labels).build()
    with torch.inference_mode():
        raw = model.batch_extract_entities(
            texts,
            labels,
            batch_size=len(texts),
            threshold=threshold,
            include_confidence=True,
            include_spans=True,
            max_len=None,
        )
    answers = []
    for text, result in zip(texts, raw, strict=True):
        row, document = _row_tokens(model, text, schema)
        answers.append({"entities": result.get("entities") or {}, "row_tokens": row, "document_tokens": document})
    return answers


def serve(receive: Connection, send: Connection, config: dict[str, Any]) -> None:
    """``(texts, labels, threshold)`` in, ``("ok", answers)`` or ``("failed", message)`` out."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        model = _load(config["side_path"], config["model_path"], int(config["threads"]))
    except Exception as exc:  # reported to the parent, which fails the load
        send.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    send.send(("ready", model.architecture))
    while True:
        try:
            texts, labels, threshold = receive.recv()
        except (EOFError, OSError):
            return
        try:
            send.send(("ok", entities(model, texts, labels, threshold)))
        except Exception as exc:  # one call's failure is its own answer
            send.send(("failed", f"{type(exc).__name__}: {str(exc)[:300]}"))


if __name__ == "__main__":
    from sift_server.adapters.conversion_process import child_connections

    receive, send, config = child_connections(sys.argv)
    serve(receive, send, config)
