"""What a worker's heartbeat says of its loaded model, and how the gateway, which
loads nothing, describes a model from it (pure). ``GET /v1/models/{name}``
through a gateway then answers what ``sift serve`` answers once the model is
loaded (its dims, outputs, runtime), so clients that read them work unchanged."""

from __future__ import annotations

from typing import Any

# The fields of a model's description that only a loaded model knows.
LOADED_FIELDS = ("outputs", "dims", "max_sequence_length", "runtime")


def worker_view(described: dict[str, Any]) -> dict[str, Any]:
    """The loaded-model fields of a worker's own description of its model."""
    if not described.get("loaded"):
        return {}
    return {k: described[k] for k in LOADED_FIELDS if k in described}


def describe_through_gateway(described: dict[str, Any], view: dict[str, Any] | None) -> dict[str, Any]:
    """The gateway's description of a model: from the catalog, with a live
    worker's view of the loaded model over it (none: not loaded anywhere)."""
    if not view:
        return described
    return {**described, **{k: view[k] for k in LOADED_FIELDS if k in view}, "loaded": True, "state": "loaded"}
