"""Run by the compatibility venv's Python 3.12 (not by pytest): the released
``sie-sdk`` and the ``openai`` client against one Sift URL, black-box.

``python sie_driver.py URL API_KEY SPEC_JSON`` prints one JSON object with what
each client returned (vectors as lists), or the error it raised, per call. The
test compares the answers of ``sift serve`` and of a gateway.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any


def _plain(value: Any) -> Any:
    """numpy arrays and SDK result objects as JSON-able values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return _plain(vars(value))
    return repr(value)


def _attempt(out: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        out[name] = {"ok": _plain(call())}
    except Exception as exc:  # reported to the test, which decides
        out[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def main(url: str, api_key: str, spec: dict[str, Any]) -> dict[str, Any]:
    import sie_sdk
    from sie_sdk import SIEClient

    out: dict[str, Any] = {"sie_sdk_version": sie_sdk.get_sdk_version()}
    key = api_key or None
    with SIEClient(url, api_key=key, timeout_s=60) as client:
        embedder = spec["embedder"]
        _attempt(out, "encode_one", lambda: client.encode(embedder, {"text": "hello world"}))
        _attempt(
            out,
            "encode_many",
            lambda: client.encode(embedder, [{"text": "first text"}, {"id": "b", "text": "second text"}]),
        )
        if spec.get("reranker"):
            _attempt(
                out,
                "score",
                lambda: client.score(
                    spec["reranker"],
                    {"text": "where did Ada Lovelace work?"},
                    [{"id": "x", "text": "Ada Lovelace worked in London."}, {"id": "y", "text": "Revenue grew."}],
                ),
            )
        if spec.get("extractor"):
            _attempt(
                out,
                "extract",
                lambda: client.extract(
                    spec["extractor"],
                    [{"text": "Marie Curie was born in Warsaw and worked in Paris."}],
                    labels=["person", "city"],
                ),
            )
        _attempt(out, "missing_model", lambda: client.encode("no-such-org/no-such-model", {"text": "x"}))
    if spec.get("openai"):
        from openai import OpenAI

        openai = OpenAI(base_url=url + "/v1", api_key=api_key or "unused", max_retries=0, timeout=60)
        _attempt(
            out,
            "openai_embeddings",
            lambda: [d.embedding for d in openai.embeddings.create(model=embedder, input=["one", "two"]).data],
        )
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))
