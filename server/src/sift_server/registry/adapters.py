"""Adapter names used in the catalog, imported lazily (gliner and friends are heavy)."""

from __future__ import annotations

import importlib

from sift_server.adapters.base import Adapter

ADAPTERS: dict[str, str] = {
    "sentence-embedder": "sift_server.adapters.sentence_embedder:SentenceEmbedderAdapter",
    "cross-encoder": "sift_server.adapters.cross_encoder:CrossEncoderAdapter",
    "gliner": "sift_server.adapters.gliner_extractor:GlinerAdapter",
    "gliclass": "sift_server.adapters.gliclass_classifier:GliClassAdapter",
    "sparse-encoder": "sift_server.adapters.sparse_encoder:SparseEncoderAdapter",
    "colbert": "sift_server.adapters.colbert:ColbertAdapter",
    "clip": "sift_server.adapters.clip:ClipAdapter",
    "nli": "sift_server.adapters.nli:NliAdapter",
    "gliner2": "sift_server.adapters.gliner2_extractor:Gliner2Adapter",
}

# Adapters that read ``params.output_schema`` (structured extraction).
STRUCTURED_EXTRACT: frozenset[str] = frozenset({"gliner2"})

# What ``encode`` returns per adapter, known before a model loads (``/v1/models``).
ENCODE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "sentence-embedder": ("dense",),
    "sparse-encoder": ("sparse",),
    "colbert": ("multivector",),
    "clip": ("dense",),
}


# What a model of each adapter reads, where not text alone (``/v1/models``).
INPUTS: dict[str, tuple[str, ...]] = {
    "clip": ("text", "image"),
}


# Adapters that run on PyTorch only (their entries' ``backend`` is not consulted, so
# ``auto`` has nothing to decide for them).
TORCH_ONLY = frozenset({"clip", "gliner2"})


def adapter_class(name: str) -> type[Adapter]:
    module_name, _, attribute = ADAPTERS[name].partition(":")
    cls: object = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise TypeError(f"{ADAPTERS[name]} is not an Adapter")
    return cls
