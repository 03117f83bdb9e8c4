"""The work routes' OpenAPI entries, generated from the endpoint table
(core/endpoints.py) and the msgspec structs each decodes to, and added to the
document FastAPI makes of its own routes (models, health)."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from sift_server.core.endpoints import ENDPOINTS, Endpoint

_REF = "#/components/schemas/{name}"
_MODEL_PARAMETER = {
    "name": "model",
    "in": "path",
    "required": True,
    "description": "The model's name, with an optional ':profile' (it may contain '/').",
    "schema": {"type": "string"},
}


def _media(endpoint: Endpoint, schema: dict[str, Any]) -> dict[str, Any]:
    if endpoint.family == "openai":
        return {"application/json": {"schema": schema}}
    return {"application/json": {"schema": schema}, "application/msgpack": {"schema": schema}}


def _operation(endpoint: Endpoint, schema: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "operationId": f"{endpoint.name}_post",
        "requestBody": {"required": True, "content": _media(endpoint, schema)},
        "responses": {
            "200": {"description": "The answer, in the format the Accept header asks for"},
            "default": {"description": f"An error in the {endpoint.family} envelope"},
        },
    }
    if endpoint.model_in_path:
        operation["parameters"] = [_MODEL_PARAMETER]
    return operation


def work_paths() -> tuple[dict[str, Any], dict[str, Any]]:
    """The work routes' path items and the component schemas they refer to."""
    bodies, components = msgspec.json.schema_components([e.schema for e in ENDPOINTS], ref_template=_REF)
    paths = {e.template: {"post": _operation(e, body)} for e, body in zip(ENDPOINTS, bodies, strict=True)}
    return paths, components


def document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document of its routes, with the work routes added (cached on the app)."""
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        paths, components = work_paths()
        spec["paths"] = {**paths, **spec.get("paths", {})}
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(components)
        app.openapi_schema = spec
    return app.openapi_schema


def install(app: FastAPI) -> None:
    """Serve :func:`document` at /openapi.json (FastAPI's documented way to extend it)."""

    def openapi() -> dict[str, Any]:
        return document(app)

    app.openapi = openapi  # type: ignore[method-assign]
