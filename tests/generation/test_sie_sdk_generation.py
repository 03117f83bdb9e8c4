"""The released sie-sdk 0.10.1's ``generate``, ``stream_generate``, ``chat_completions``,
``stream_chat_completions`` and ``responses`` against ``sift serve``, unchanged: each
returns transformers' own greedy answer (the SDK runs under Python 3.12 in
``.venv/sie-compat``, in a subprocess: tests/compat/conftest.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import COMPAT_PYTHON, require_venv
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_generator import TINY_GENERATOR
from tests.generation.conftest import Reference

DRIVER = Path(__file__).with_name("sie_generation_driver.py")
PROMPT = "The quick brown fox"
MESSAGES = [{"role": "user", "content": "Say yes or no."}]
N = 20


@pytest.fixture(scope="module")
def answers(server: ServerProcess) -> dict[str, Any]:
    require_venv()
    spec = {"model": TINY_GENERATOR, "prompt": PROMPT, "messages": MESSAGES, "max_new_tokens": N}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), server.url, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def ok(answers: dict[str, Any], name: str) -> Any:
    assert "ok" in answers[name], answers[name].get("trace", answers[name])
    return answers[name]["ok"]


def test_generate_and_stream_generate(answers: dict[str, Any], reference: Reference) -> None:
    expected, ids = reference.greedy(reference.ids_of(PROMPT), N)
    result = ok(answers, "generate")
    assert result["text"] == expected and result["model"] == TINY_GENERATOR
    assert result["usage"]["completion_tokens"] == len(ids)
    chunks = ok(answers, "stream_generate")
    assert "".join(c.get("text_delta", "") for c in chunks) == expected
    assert chunks[-1]["done"] is True and chunks[-1]["usage"] == result["usage"]


def test_chat_completions_and_responses(answers: dict[str, Any], reference: Reference) -> None:
    expected, ids = reference.greedy(reference.chat_ids(MESSAGES), N)
    chat = ok(answers, "chat_completions")
    assert chat["choices"][0]["message"]["content"] == expected
    chunks = ok(answers, "stream_chat_completions")
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == expected
    assert chunks[-1]["usage"]["completion_tokens"] == len(ids)
    response = ok(answers, "responses")
    assert response["output"][0]["content"][0]["text"] == expected
