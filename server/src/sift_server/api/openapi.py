"""The OpenAPI document: the work routes' entries, generated from the endpoint
table (core/endpoints.py) and the msgspec structs each decodes to, with the
answers and error envelopes of api/openapi_contract.py; the entries of the
models routes and probes; and whatever else FastAPI serves."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from sift_server.api.openapi_contract import (
    ANSWERS,
    REQUEST_EXAMPLES,
    SCHEMAS,
    TEXT_ANSWERS,
    WORK_ERRORS,
    errors,
    ref,
    served_paths,
)
from sift_server.core.endpoints import ENDPOINTS, Endpoint

_REF = "#/components/schemas/{name}"
_MODEL_PARAMETER = {
    "name": "model",
    "in": "path",
    "required": True,
    "description": "The model's name, with an optional ':profile' (it may contain '/').",
    "schema": {"type": "string"},
}


_MSGPACK = (
    " The body may also be MessagePack ('Content-Type: application/msgpack', the SDK's wire and the"
    " answer's default format: API.md §1.2-1.3); only its JSON form is described here."
)


def _answer(endpoint: Endpoint) -> dict[str, Any]:
    schema = ref(ANSWERS[endpoint.name])
    if endpoint.family == "openai":
        content: dict[str, Any] = {"application/json": {"schema": schema}}
        content.update({media: {"schema": {"type": "string"}} for media in TEXT_ANSWERS.get(endpoint.name, ())})
        return {"description": "The answer", "content": content}
    return {
        "description": "The answer: JSON when Accept asks for application/json only, else MessagePack"
        " (whose arrays are nd-maps, API.md §1.3)",
        "content": {"application/json": {"schema": schema}, "application/msgpack": {}},
    }


def _example(endpoint: Endpoint) -> dict[str, Any]:
    example = REQUEST_EXAMPLES.get(endpoint.name)
    return {} if example is None else {"example": example}


def _operation(endpoint: Endpoint, schema: dict[str, Any]) -> dict[str, Any]:
    envelope = "OpenAIError" if endpoint.family == "openai" else "NativeError"
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "description": endpoint.summary + "." + ("" if endpoint.family == "openai" else _MSGPACK),
        "operationId": f"{endpoint.name}_post",
        "requestBody": {"required": True, "content": {endpoint.media_type: {"schema": schema, **_example(endpoint)}}},
        "responses": {"200": _answer(endpoint), **errors(WORK_ERRORS, envelope)},
    }
    if endpoint.model_in_path:
        operation["parameters"] = [_MODEL_PARAMETER]
    return operation


def work_paths() -> tuple[dict[str, Any], dict[str, Any]]:
    """The work routes' path items and the component schemas they refer to."""
    bodies, components = msgspec.json.schema_components([e.schema for e in ENDPOINTS], ref_template=_REF)
    for endpoint in ENDPOINTS:
        if endpoint.media_type == "multipart/form-data":
            # A form's file part is binary, not msgspec's base64 string.
            fields = components[endpoint.schema.__name__]["properties"]
            fields["file"] = {"type": "string", "format": "binary"}
    paths = {e.template: {"post": _operation(e, body)} for e, body in zip(ENDPOINTS, bodies, strict=True)}
    return paths, {**components, **SCHEMAS}


def document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document of its routes, with the work routes added (cached on the app)."""
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        paths, components = work_paths()
        spec["paths"] = {**paths, **served_paths(), **spec.get("paths", {})}
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(components)
        app.openapi_schema = spec
    return app.openapi_schema


def install(app: FastAPI) -> None:
    """Serve :func:`document` at /openapi.json (FastAPI's documented way to extend it)."""

    def openapi() -> dict[str, Any]:
        return document(app)

    app.openapi = openapi  # type: ignore[method-assign]
