"""``GET /v1/models`` and ``GET /v1/models/{model}``: cheap, never load a model."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from sift_server.adapters.records import record_of
from sift_server.api.errors import native_error
from sift_server.core.state import ServerState
from sift_server.errors import SiftError
from sift_server.registry.registry import ModelRecord

router = APIRouter()

_TASK_OUTPUTS = {"score": ["score"], "extract": ["json"]}


def model_info(record: ModelRecord, runtime_instance: str) -> dict[str, Any]:
    spec = record.spec
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
        "name": spec.name,
        "inputs": list(record.adapter.info.inputs if record.adapter else adapter.inputs),
        "outputs": outputs,
        "dims": dims,
        "loaded": record.state == "loaded",
        "state": record.state,
        "last_error": record.last_error.as_dict() if record.last_error else None,
        "max_sequence_length": record.adapter.info.max_sequence_length if record.adapter else spec.max_sequence_length,
        "profiles": {
            "default": {
                "is_default": True,
                "identity": None,
                "remote_contract_sha256": None,
                "remote_execution_sha256": None,
                "runtime_instance_id": runtime_instance,
            }
        },
        "revision": spec.source.revision,
        "capabilities": None,
        "routing": {"policy": None, "upstream_kind": None},
        "tasks": list(spec.tasks),
        "description": spec.description,
        "runtime": dict(record.adapter.info.runtime) if record.adapter else None,
    }


@router.get("/v1/models", summary="List the catalog's models")
async def list_models(request: Request) -> Response:
    state: ServerState = request.app.state.sift
    records = [state.registry.records[name] for name in state.registry.catalog.names()]
    return JSONResponse({"models": [model_info(r, state.runtime_instance) for r in records]})


@router.get("/v1/models/{model:path}", summary="Describe one model")
async def get_model(request: Request, model: str) -> Response:
    state: ServerState = request.app.state.sift
    try:
        record = state.registry.record(model)
    except SiftError as error:
        return native_error(error)
    return JSONResponse(model_info(record, state.runtime_instance))
