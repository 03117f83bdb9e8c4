"""What the OpenAPI document says the routes answer: the success bodies, the
contract's error envelopes (native and OpenAI, API.md §1.7 and §5) with their
status codes, and the entries of the routes FastAPI serves (models, probes,
metrics). Precise on purpose: a schema-driven fuzzer (tests/fuzz) checks every
response against it, so a closed object here is a closed object in the contract."""

from __future__ import annotations

from typing import Any

_REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(name=name)}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_OBJ = {"type": "object"}


def _closed(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties, "additionalProperties": False}


def _open(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


_VALUES = {"type": "array", "items": _NUM}
_NAMED_SCORE = _open(["label", "score"], {"label": _STR, "score": _NUM})

SCHEMAS: dict[str, dict[str, Any]] = {
    # Some codes add fields beside code and message (MODEL_LOAD_FAILED's error_class, ...).
    "NativeError": _closed(
        ["detail"], {"detail": _open(["code", "message"], {"code": {**_STR, "minLength": 1}, "message": _STR})}
    ),
    "OpenAIError": _closed(
        ["error"],
        {
            "error": _open(
                ["message", "type", "param", "code"],
                {
                    "message": _STR,
                    "type": {"enum": ["invalid_request_error", "server_error"]},
                    "param": {"type": ["string", "null"]},
                    "code": {**_STR, "minLength": 1},
                },
            )
        },
    ),
    "EncodeAnswer": _closed(
        ["model", "items", "timing"],
        {
            "model": _STR,
            "items": {"type": "array", "items": ref("EncodedItem")},
            "timing": _open(
                ["total_ms", "queue_ms", "tokenization_ms", "inference_ms"],
                {
                    "total_ms": _NUM,
                    "queue_ms": _NUM,
                    "tokenization_ms": _NUM,
                    "inference_ms": _NUM,
                    "postprocessing_ms": {"type": ["number", "null"]},
                },
            ),
            "usage": _OBJ,
        },
    ),
    "EncodedItem": _closed(
        [],
        {
            "id": _STR,
            "dense": _closed(["dims", "dtype", "values"], {"dims": _INT, "dtype": _STR, "values": _VALUES}),
            "sparse": _closed(
                ["dims", "dtype", "indices", "values"],
                {"dims": {"type": ["integer", "null"]}, "dtype": _STR, "indices": _VALUES, "values": _VALUES},
            ),
            "multivector": _closed(
                ["token_dims", "num_tokens", "dtype", "values"],
                {"token_dims": _INT, "num_tokens": _INT, "dtype": _STR, "values": {"type": "array", "items": _VALUES}},
            ),
        },
    ),
    "ScoreAnswer": _closed(
        ["model", "query_id", "scores"],
        {
            "model": _STR,
            "query_id": {"type": ["string", "null"]},
            "scores": {
                "type": "array",
                "items": _closed(["item_id", "score", "rank"], {"item_id": _STR, "score": _NUM, "rank": _INT}),
            },
            "usage": _OBJ,
        },
    ),
    "ExtractAnswer": _closed(
        ["model", "items"],
        {"model": _STR, "items": {"type": "array", "items": ref("ExtractedItem")}, "usage": _OBJ},
    ),
    "ExtractedItem": _open(
        ["id"],
        {
            "id": _STR,
            "entities": {
                "type": "array",
                "items": _open(["text", "label", "score"], {"text": _STR, "label": _STR, "score": _NUM}),
            },
            "relations": {
                "type": "array",
                "items": _open(
                    ["head", "tail", "relation", "score"], {"head": {}, "tail": {}, "relation": _STR, "score": _NUM}
                ),
            },
            "classifications": {"type": "array", "items": _NAMED_SCORE},
            "objects": {"type": "array", "items": _open(["label", "score", "bbox"], _NAMED_SCORE["properties"])},
            "data": _OBJ,
            "error": _closed(
                ["code", "message"], {"code": {**_STR, "minLength": 1}, "message": {**_STR, "minLength": 1}}
            ),
        },
    ),
    "EmbeddingsAnswer": _closed(
        ["object", "data", "model", "usage"],
        {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": _closed(
                    ["object", "embedding", "index"],
                    {"object": {"const": "embedding"}, "embedding": {"oneOf": [_VALUES, _STR]}, "index": _INT},
                ),
            },
            "model": _STR,
            "usage": _closed(
                ["prompt_tokens", "total_tokens", "sie_token_source"],
                {
                    "prompt_tokens": _INT,
                    "total_tokens": _INT,
                    "sie_token_source": {"enum": ["worker", "character_estimate"]},
                },
            ),
        },
    ),
    "RerankAnswer": _closed(
        ["model", "results", "usage"],
        {
            "model": _STR,
            "results": {
                "type": "array",
                "items": _closed(
                    ["index", "relevance_score"],
                    {"index": _INT, "relevance_score": _NUM, "document": _closed(["text"], {"text": _STR})},
                ),
            },
            "usage": _OBJ,
        },
    ),
    # Open: the gateway lays a live worker's view over the catalog's entry.
    "ModelInfo": _open(
        ["name", "inputs", "outputs", "dims", "loaded", "state", "tasks", "profiles"],
        {
            "name": _STR,
            "inputs": {"type": "array", "items": _STR},
            "outputs": {"type": "array", "items": _STR},
            "dims": {"type": "object", "additionalProperties": _INT},
            "loaded": {"type": "boolean"},
            "state": _STR,
            "tasks": {"type": "array", "items": _STR},
            "profiles": _OBJ,
        },
    ),
    # The generation answers (generation/answers.py); with stream: true, server-sent events instead.
    "GenerateAnswer": _open(
        ["model", "text", "finish_reason", "usage"],
        {"model": _STR, "text": _STR, "finish_reason": _STR, "usage": _OBJ},
    ),
    "ChatCompletion": _open(
        ["id", "object", "created", "model", "choices", "usage"],
        {"id": _STR, "object": _STR, "created": _INT, "model": _STR, "choices": {"type": "array"}, "usage": _OBJ},
    ),
    "TextCompletion": _open(
        ["id", "object", "created", "model", "choices"],
        {"id": _STR, "object": _STR, "created": _INT, "model": _STR, "choices": {"type": "array"}},
    ),
    "ResponseAnswer": _open(
        ["id", "object", "created_at", "model", "status", "output", "usage"],
        {
            "id": _STR,
            "object": _STR,
            "created_at": _INT,
            "model": _STR,
            "status": _STR,
            "output": {"type": "array"},
            "usage": _OBJ,
        },
    ),
    "ModelList": _closed(["models"], {"models": {"type": "array", "items": ref("ModelInfo")}}),
    # response_format json ({text, usage}) and verbose_json (with task, language, duration, segments).
    "TranscriptionAnswer": _open(
        ["text"],
        {
            "text": _STR,
            "usage": _open(["type", "seconds"], {"type": _STR, "seconds": _NUM}),
            "task": _STR,
            "language": _STR,
            "duration": _NUM,
            "segments": {
                "type": "array",
                "items": _open(
                    ["id", "start", "end", "text"],
                    {"id": _INT, "start": _NUM, "end": _NUM, "text": _STR, "tokens": {"type": "array", "items": _INT}},
                ),
            },
        },
    ),
}

ANSWERS = {
    "encode": "EncodeAnswer",
    "score": "ScoreAnswer",
    "extract": "ExtractAnswer",
    "embeddings": "EmbeddingsAnswer",
    "rerank": "RerankAnswer",
    "generate": "GenerateAnswer",
    "chat": "ChatCompletion",
    "completions": "TextCompletion",
    "responses": "ResponseAnswer",
    "transcriptions": "TranscriptionAnswer",
}

# Answers in a text format besides JSON (response_format text, srt, vtt).
TEXT_ANSWERS: dict[str, tuple[str, ...]] = {
    "transcriptions": ("text/plain", "application/x-subrip", "text/vtt"),
}

# One request body each, in the document as the request's example (tests/fuzz sends them).
REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "encode": {"items": [{"id": "d1", "text": "A small example."}]},
    "score": {"query": {"text": "example"}, "items": [{"id": "d1", "text": "A small example."}]},
    "extract": {"items": [{"text": "Ada Lovelace met Charles Babbage."}], "params": {"labels": ["person"]}},
    "embeddings": {"model": "sentence-transformers/all-MiniLM-L6-v2", "input": "A small example."},
    "rerank": {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "query": "example", "documents": ["A small example."]},
}

_ERROR_CODE = {"X-SIE-Error-Code": {"required": True, "schema": _STR, "description": "The domain code, upper case"}}
_RETRY_AFTER = {"Retry-After": {"schema": _STR, "description": "Seconds to wait before retrying"}}

# Why each status is answered (API.md §1.7); every one in the family's envelope.
_REASONS = {
    400: "Invalid input (INVALID_INPUT, INPUT_TOO_LONG, unsupported_field, UPSTREAM_REJECTED)",
    401: "Missing or wrong API key (UNAUTHORIZED), when the server has one",
    404: "Unknown model (MODEL_NOT_FOUND)",
    408: "The body did not arrive within the body timeout (REQUEST_TIMEOUT)",
    413: "The body is over the size limit (INPUT_TOO_LONG)",
    502: "The model failed to load (MODEL_LOAD_FAILED), or a remote model's upstream failed (UPSTREAM_*)",
    503: "Not now (MODEL_LOADING, RESOURCE_EXHAUSTED, QUEUE_FULL, SHUTTING_DOWN, UPSTREAM_BUSY, ...), with Retry-After",
    504: "A remote generation model's upstream did not answer in time (UPSTREAM_TIMEOUT)",
}
WORK_ERRORS = (400, 401, 404, 408, 413, 502, 503, 504)
GATED_ERRORS = (401, 503)  # what the front door answers on every route but the probes


def errors(statuses: tuple[int, ...], envelope: str) -> dict[str, Any]:
    return {
        str(status): {
            "description": _REASONS[status],
            "headers": {**_ERROR_CODE, **(_RETRY_AFTER if status == 503 else {})},
            "content": {"application/json": {"schema": ref(envelope)}},
        }
        for status in statuses
    }


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": _STR}}}


def _get(operation_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"get": {"operationId": operation_id, "summary": summary, "responses": responses, **extra}}


_MODEL_IN_PATH = {"name": "model", "in": "path", "required": True, "schema": _STR}


def served_paths() -> dict[str, Any]:
    """The entries of the routes FastAPI serves (api/models.py, api/health.py)."""
    return {
        "/v1/models": _get(
            "list_models",
            "List the catalog's models",
            {
                "200": {
                    "description": "Every catalog model",
                    "content": {"application/json": {"schema": ref("ModelList")}},
                },
                **errors(GATED_ERRORS, "NativeError"),
            },
        ),
        "/v1/models/{model}": _get(
            "get_model",
            "Describe one model (never loads it)",
            {
                "200": {"description": "The model", "content": {"application/json": {"schema": ref("ModelInfo")}}},
                **errors((*GATED_ERRORS, 404), "NativeError"),
            },
            parameters=[_MODEL_IN_PATH],
        ),
        "/healthz": _get("healthz", "The process is up", {"200": _text("ok")}),
        "/livez": _get("livez", "The process is up", {"200": _text("ok")}),
        "/readyz": _get(
            "readyz", "Ready to serve (not while starting or draining)", {"200": _text("ok"), "503": _text("not ready")}
        ),
        "/metrics": _get(
            "metrics",
            "Prometheus metrics",
            {"200": _text("The text exposition format"), **errors(GATED_ERRORS, "NativeError")},
        ),
    }
