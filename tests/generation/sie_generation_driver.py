"""Run by the compatibility venv's Python 3.12 (not by pytest): the released sie-sdk's
generation calls against one Sift URL, black-box.

``python sie_generation_driver.py URL SPEC_JSON`` prints one JSON object: per call,
what the SDK returned or the error it raised."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any


def _attempt(out: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        out[name] = {"ok": json.loads(json.dumps(call(), default=repr))}
    except Exception as exc:  # reported to the test, which decides
        out[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def main(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from sie_sdk import SIEClient

    model, prompt, messages, n = spec["model"], spec["prompt"], spec["messages"], spec["max_new_tokens"]
    out: dict[str, Any] = {}
    with SIEClient(url, timeout_s=60) as client:
        _attempt(out, "generate", lambda: client.generate(model, prompt, max_new_tokens=n, temperature=0.0))
        _attempt(
            out,
            "stream_generate",
            lambda: list(client.stream_generate(model, prompt, max_new_tokens=n, temperature=0.0)),
        )
        _attempt(
            out,
            "chat_completions",
            lambda: client.chat_completions(model, messages, max_tokens=n, temperature=0.0),
        )
        _attempt(
            out,
            "stream_chat_completions",
            lambda: list(
                client.stream_chat_completions(
                    model, messages, max_tokens=n, temperature=0.0, stream_options={"include_usage": True}
                )
            ),
        )
        _attempt(out, "responses", lambda: client.responses(model, messages, max_output_tokens=n, temperature=0.0))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
