"""Domain errors, each with the contract's machine-readable code and HTTP status.

Everything below the HTTP layer raises these; the API layer turns them into
the contract's envelopes. Nothing here knows about HTTP libraries.
"""

from __future__ import annotations


class SiftError(Exception):
    status: int = 500
    code: str = "INTERNAL_ERROR"
    retry_after: int | None = None
    # Answer with ``Connection: close`` (the request body was not read to its end).
    close_connection: bool = False

    def __init__(self, message: str, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class InvalidInput(SiftError):
    status, code = 400, "INVALID_INPUT"


class TaskNotSupported(InvalidInput):
    """The model exists but does not do the requested task (encode, score, extract)."""


class UnsupportedField(InvalidInput):
    """A field the route knows but cannot honour for this model."""

    code = "unsupported_field"


class InputTooLong(SiftError):
    status, code = 400, "INPUT_TOO_LONG"


class BodyTooLarge(SiftError):
    status, code, close_connection = 413, "INPUT_TOO_LONG", True


class BodyTimeout(SiftError):
    """The client did not send its whole body within the body timeout."""

    status, code, close_connection = 408, "REQUEST_TIMEOUT", True


class Unauthorized(SiftError):
    status, code = 401, "UNAUTHORIZED"


class ModelNotFound(SiftError):
    status, code = 404, "MODEL_NOT_FOUND"


class ModelLoading(SiftError):
    status, code, retry_after = 503, "MODEL_LOADING", 5


class LoraLoading(SiftError):
    status, code, retry_after = 503, "LORA_LOADING", 1


class ModelLoadFailed(SiftError):
    status, code = 502, "MODEL_LOAD_FAILED"


class QueueFull(SiftError):
    status, code, retry_after = 503, "QUEUE_FULL", 1


class QueueTimeout(QueueFull):
    """A queued request waited past the queue deadline: answering it now would
    be an answer nobody waits for, so it is refused like a full queue."""


class ResourceExhausted(SiftError):
    """The model waits for memory held by models that are serving (their turn runs);
    Retry-After says when it is expected to serve (registry/residency.py)."""

    status, code, retry_after = 503, "RESOURCE_EXHAUSTED", 5


class ShuttingDown(SiftError):
    status, code, retry_after = 503, "SHUTTING_DOWN", 5


class RouteNotFound(SiftError):
    """No route at this path."""

    status, code = 404, "NOT_FOUND"


class MethodNotAllowed(SiftError):
    """The path exists, the method does not (``allow``: the methods it takes)."""

    status, code = 405, "METHOD_NOT_ALLOWED"


class InferenceError(SiftError):
    status, code = 500, "INFERENCE_ERROR"


class UpstreamError(SiftError):
    """An operator's upstream (a remote generation model) failed: a 5xx, an answer
    that is not the OpenAI shape, a stream cut short, or credentials it refused."""

    status, code = 502, "UPSTREAM_ERROR"


class UpstreamUnreachable(UpstreamError):
    """No connection to the upstream could be made."""

    code = "UPSTREAM_UNREACHABLE"


class UpstreamBusy(SiftError):
    """The upstream said 429: the same request may succeed later."""

    status, code, retry_after = 503, "UPSTREAM_BUSY", 1


class UpstreamRejected(SiftError):
    """The upstream refused the request itself (400/413/422), e.g. a prompt over its context."""

    status, code = 400, "UPSTREAM_REJECTED"


class UpstreamTimeout(SiftError):
    """The upstream did not answer, or paused mid-answer, past the entry's read timeout."""

    status, code = 504, "UPSTREAM_TIMEOUT"


class RequestCancelled(SiftError):
    """The client went away; nobody reads this answer."""

    status, code = 499, "CANCELLED"


# The longest Retry-After a client waiting for a model is told (a longer wait comes
# back for a fresh estimate); registry/residency.py computes the values up to it.
MAX_WAIT_RETRY_AFTER_S = 15

# The longest Retry-After the server ever sends (the drain answer uses
# ShuttingDown's). The idle keep-alive timeout must be longer, so that a client
# that waits exactly Retry-After never reuses a connection the server is closing.
MAX_RETRY_AFTER_S = max(
    MAX_WAIT_RETRY_AFTER_S,
    *(cls.retry_after for cls in (ModelLoading, QueueFull, ResourceExhausted, ShuttingDown) if cls.retry_after),
)
