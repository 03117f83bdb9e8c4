"""``GET /v1/models`` and ``GET /v1/models/{model}``: cheap, never load a model.
``sift serve`` describes a model from its own registry (:func:`describe_local`);
the gateway adds what a live worker's heartbeat says (cluster/gateway.py). Their
OpenAPI entries are written in api/openapi_contract.py (FastAPI's would promise a 422)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from sift_server.adapters.records import record_of
from sift_server.api.errors import native_error
from sift_server.core.state import ServerState
from sift_server.errors import SiftError
from sift_server.registry.registry import ModelRecord

_TASK_OUTPUTS = {"score": ["score"], "extract": ["json"], "generate": ["text"], "transcribe": ["text"]}


def _profile_info(is_default: bool, runtime_instance: str) -> dict[str, Any]:
    return {
        "is_default": is_default,
        "identity": None,
        "remote_contract_sha256": None,
        "remote_execution_sha256": None,
        "runtime_instance_id": runtime_instance,
    }


def model_info(record: ModelRecord, runtime_instance: str, profile: str | None = None) -> dict[str, Any]:
    """The entry's ModelInfo, with its profiles; ``profile``: the ``{name}:{profile}``
    entry's, whose only profile is its ``default`` (the reference's profile variants)."""
    spec = record.spec
    profiles = {"default": _profile_info(True, runtime_instance)}
    if profile is None:
        profiles.update((name, _profile_info(False, runtime_instance)) for name in spec.profiles)
    adapter = record_of(spec.adapter)
    outputs: list[str] = []
    dims: dict[str, int] = {}
    if record.adapter is not None:
        dims = dict(record.adapter.info.dims)
    for task in spec.tasks:
        if task == "encode":
            outputs.extend(record.adapter.info.outputs if record.adapter else adapter.encode_outputs)
        else:
            outputs.extend(_TASK_OUTPUTS[task])
    return {
        "name": spec.name if profile is None else f"{spec.name}:{profile}",
        "inputs": list(record.adapter.info.inputs if record.adapter else adapter.inputs),
        "outputs": outputs,
        "dims": dims,
        "loaded": record.state == "loaded",
        "state": record.state,
        "last_error": record.last_error.as_dict() if record.last_error else None,
        "max_sequence_length": record.adapter.info.max_sequence_length if record.adapter else spec.max_sequence_length,
        "profiles": profiles,
        "revision": spec.source.revision if spec.source is not None else None,
        "capabilities": None,
        # A remote model is served by its upstream alone, as the reference's remote-backed models.
        "routing": {"policy": "remote_only", "upstream_kind": "openai"}
        if spec.remote is not None
        else {"policy": None, "upstream_kind": None},
        "tasks": list(spec.tasks),
        "description": spec.description,
        "runtime": dict(record.adapter.info.runtime) if record.adapter else None,
    }


# How one catalog model is described (raises SiftError, e.g. MODEL_NOT_FOUND).
Describe = Callable[[ServerState, str], Awaitable[dict[str, Any]]]


async def describe_local(state: ServerState, name: str) -> dict[str, Any]:
    entry, profile = state.registry.catalog.addressed(name)
    return model_info(state.registry.record(entry), state.runtime_instance, profile)


def models_router(describe: Describe) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models", include_in_schema=False)
    async def list_models(request: Request) -> Response:
        state: ServerState = request.app.state.sift
        return JSONResponse({"models": [await describe(state, name) for name in state.registry.catalog.listed()]})

    @router.get("/v1/models/{model:path}", include_in_schema=False)
    async def get_model(request: Request, model: str) -> Response:
        try:
            return JSONResponse(await describe(request.app.state.sift, model))
        except SiftError as error:
            return native_error(error)

    return router
