"""The error envelopes (``core.envelopes``) as Starlette responses, and Starlette's
own routing errors (404, 405) in them."""

from __future__ import annotations

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sift_server.core.endpoints import envelope_for_path
from sift_server.core.envelopes import native_envelope, openai_envelope
from sift_server.errors import MethodNotAllowed, RouteNotFound, SiftError


def native_error(error: SiftError, runtime_instance: str | None = None) -> JSONResponse:
    status, body, headers = native_envelope(error, runtime_instance)
    return JSONResponse(body, status_code=status, headers=headers)


def openai_error(error: SiftError, param: str | None = None) -> JSONResponse:
    status, body, headers = openai_envelope(error, param)
    return JSONResponse(body, status_code=status, headers=headers)


_ROUTING_ERRORS: dict[int, type[SiftError]] = {404: RouteNotFound, 405: MethodNotAllowed}


async def routing_error(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (no route: 404, a route without this method: 405)
    in the envelope of the path's API family, like every other error."""
    assert isinstance(exc, StarletteHTTPException)
    kind = _ROUTING_ERRORS.get(exc.status_code)
    if kind is None:
        error = SiftError(str(exc.detail))
        error.status, error.code = exc.status_code, f"HTTP_{exc.status_code}"
    else:
        error = kind(_ROUTING_MESSAGES[exc.status_code].format(method=request.method, path=request.url.path))
    status, body, headers = envelope_for_path(request.url.path, error)
    return JSONResponse(body, status_code=status, headers={**(exc.headers or {}), **headers})


_ROUTING_MESSAGES = {
    404: "No route {path}; see /docs for the API's routes.",
    405: "Method {method} is not allowed on {path}; see the Allow header.",
}
