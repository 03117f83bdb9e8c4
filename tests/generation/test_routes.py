"""The generation routes against a real ``sift serve``: greedy answers at fp32 equal
transformers' own ``generate`` through every route, streamed and whole; the OpenAI
client's chat and completions calls; structured output; and bad input answered 400
in the route's envelope before any work, with nothing else disturbed."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_generator import CONTEXT, TINY_GENERATOR
from tests.generation.conftest import Reference

PATH_ID = TINY_GENERATOR.replace("/", "__")
PROMPTS = ["hello world", "The quick brown fox", "yes no yes"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say yes or no."}]
N = 24


def sse_payloads(response: httpx.Response) -> list[dict[str, Any]]:
    """The stream's JSON events; it must end with [DONE]."""
    lines = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", lines[-3:]
    return [json.loads(line) for line in lines[:-1]]


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_generate_equals_transformers_greedy(server: ServerProcess, reference: Reference, prompt: str) -> None:
    expected, ids = reference.greedy(reference.ids_of(prompt), N)
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": prompt, "max_new_tokens": N, "temperature": 0})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["text"] == expected
    assert body["model"] == TINY_GENERATOR
    assert body["usage"] == {
        "prompt_tokens": len(reference.ids_of(prompt)),
        "completion_tokens": len(ids),
        "total_tokens": len(reference.ids_of(prompt)) + len(ids),
    }
    assert body["finish_reason"] == ("length" if len(ids) == N else "stop")

    with httpx.stream(
        "POST", f"{server.url}/v1/generate/{PATH_ID}", json={"prompt": prompt, "max_new_tokens": N, "stream": True}
    ) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = sse_payloads(streamed)
    assert "".join(e["text_delta"] for e in events) == expected
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["done"] is True and events[-1]["usage"] == body["usage"]
    assert all(e["done"] is False for e in events[:-1])


def test_chat_completions_equal_transformers_greedy(server: ServerProcess, reference: Reference) -> None:
    expected, ids = reference.greedy(reference.chat_ids(MESSAGES), N)
    body = {"model": TINY_GENERATOR, "messages": MESSAGES, "max_tokens": N, "temperature": 0}
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert answer.json()["usage"]["completion_tokens"] == len(ids)

    streamed_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=streamed_body) as streamed:
        events = sse_payloads(streamed)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == expected
    assert events[-1]["choices"] == [] and events[-1]["usage"] == answer.json()["usage"]


def test_completions_and_responses_equal_transformers_greedy(server: ServerProcess, reference: Reference) -> None:
    expected, _ = reference.greedy(reference.ids_of(PROMPTS[1]), N)
    answer = post(server, "/v1/completions", {"model": TINY_GENERATOR, "prompt": PROMPTS[1], "max_tokens": N})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] == expected

    messages = [{"role": "user", "content": "hello"}]
    chat_expected, ids = reference.greedy(reference.chat_ids(messages), 16)
    answer = post(server, "/v1/responses", {"model": TINY_GENERATOR, "input": "hello", "max_output_tokens": 16})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["content"][0]["text"] == chat_expected
    assert answer.json()["usage"]["output_tokens"] == len(ids)


def test_openai_client(server: ServerProcess, reference: Reference) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    expected, _ = reference.greedy(reference.chat_ids(MESSAGES), N)
    chat = client.chat.completions.create(model=TINY_GENERATOR, messages=MESSAGES, max_tokens=N, temperature=0)  # type: ignore[arg-type]
    assert chat.choices[0].message.content == expected
    stream = client.chat.completions.create(
        model=TINY_GENERATOR,
        messages=MESSAGES,
        max_tokens=N,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == expected
    completion_expected, _ = reference.greedy(reference.ids_of(PROMPTS[0]), N)
    completion = client.completions.create(model=TINY_GENERATOR, prompt=PROMPTS[0], max_tokens=N, temperature=0)
    assert completion.choices[0].text == completion_expected


def test_structured_output_is_enforced(server: ServerProcess) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    body = {
        "model": TINY_GENERATOR,
        "messages": MESSAGES,
        "max_tokens": 48,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    }
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 200, answer.text
    parsed = json.loads(answer.json()["choices"][0]["message"]["content"])
    assert isinstance(parsed["answer"], int)

    grammar = {"regex": "(yes|no)[0-9]{3}"}
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": "hi", "max_new_tokens": 16, "grammar": grammar})
    assert answer.status_code == 200, answer.text
    assert re.fullmatch(grammar["regex"], answer.json()["text"])


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        (f"/v1/generate/{PATH_ID}", {"prompt": "hi", "max_new_tokens": 4, "surprise": 1}, "INVALID_INPUT"),
        (f"/v1/generate/{PATH_ID}", {"prompt": "x" * (CONTEXT * 2), "max_new_tokens": 4}, "INPUT_TOO_LONG"),
        (f"/v1/generate/{PATH_ID}", {"prompt": "hi", "max_new_tokens": 65}, "INVALID_INPUT"),
        (
            f"/v1/generate/{PATH_ID}",
            {"prompt": "hi", "max_new_tokens": 4, "grammar": {"regex": "(ab"}},
            "INVALID_INPUT",
        ),
        (
            f"/v1/generate/{PATH_ID}",
            {"prompt": "hi", "max_new_tokens": 4, "grammar": {"ebnf": "root ::= "}},
            "INVALID_INPUT",
        ),
    ],
)
def test_bad_generate_input_is_refused(server: ServerProcess, path: str, body: dict[str, Any], code: str) -> None:
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"]["code"] == code
    # The engine is untouched: the next request is answered.
    assert post(server, path, {"prompt": "hi", "max_new_tokens": 2}).status_code == 200


@pytest.mark.parametrize(
    "change",
    [
        {"surprise": 1},
        {"max_tokens": 65},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": 12}}}},
        {"messages": []},
        {"n": 2},
    ],
)
def test_bad_chat_input_is_refused(server: ServerProcess, change: dict[str, Any]) -> None:
    body = {"model": TINY_GENERATOR, "messages": MESSAGES, "max_tokens": 4, **change}
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_a_generation_model_is_listed(server: ServerProcess) -> None:
    listed = httpx.get(f"{server.url}/v1/models/{TINY_GENERATOR}", timeout=30).json()
    assert listed["tasks"] == ["generate"] and listed["outputs"] == ["text"] and listed["loaded"] is True
    paths = httpx.get(f"{server.url}/openapi.json", timeout=30).json()["paths"]
    assert {"/v1/generate/{model}", "/v1/chat/completions", "/v1/completions", "/v1/responses"} <= set(paths)
