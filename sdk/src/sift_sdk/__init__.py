"""Python SDK for Sift, an inference server speaking the SIE v1 wire protocol.

>>> from sift_sdk import SiftClient
>>> with SiftClient("http://127.0.0.1:8080") as client:
...     vectors = client.encode("BAAI/bge-small-en-v1.5", ["hello", "world"])
"""

from ._retry import RetryPolicy
from ._version import __version__
from .async_client import AsyncSiftClient
from .client import SiftClient
from .errors import (
    AuthenticationError,
    InputTooLongError,
    MalformedResponseError,
    ModelLoadFailedError,
    ModelLoadingError,
    ModelNotFoundError,
    QueueFullError,
    RateLimitError,
    RequestError,
    ResourceExhaustedError,
    ServerError,
    SiftConnectionError,
    SiftError,
    SiftTimeoutError,
)
from .results import (
    Classification,
    DetectedObject,
    EncodedItem,
    EncodeResponse,
    Entity,
    ExtractResult,
    ItemError,
    Relation,
    ScoreEntry,
    ScoreResult,
    SparseVector,
)

__all__ = [
    "AsyncSiftClient",
    "AuthenticationError",
    "Classification",
    "DetectedObject",
    "EncodeResponse",
    "EncodedItem",
    "Entity",
    "ExtractResult",
    "InputTooLongError",
    "ItemError",
    "MalformedResponseError",
    "ModelLoadFailedError",
    "ModelLoadingError",
    "ModelNotFoundError",
    "QueueFullError",
    "RateLimitError",
    "Relation",
    "RequestError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "ScoreEntry",
    "ScoreResult",
    "ServerError",
    "SiftClient",
    "SiftConnectionError",
    "SiftError",
    "SiftTimeoutError",
    "SparseVector",
    "__version__",
]
