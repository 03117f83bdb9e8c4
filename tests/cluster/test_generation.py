"""Generation through the queue against real processes (nats-server, a gateway,
one worker serving the tiny generator): greedy answers through the gateway equal
transformers' own greedy ``generate`` (what ``sift serve`` answers, tests/generation)
on every route, whole and streamed; a stream's chunks come in order as they are
made; a client that goes away cancels the run on the worker; a worker killed in
the middle of a stream ends it with the answer's error event, never a silent cut."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import consumer_state, wait_for
from tests.cluster.generation_cluster import (
    CAP,
    SLOW_GENERATOR,
    STEP_MS,
    WORKER,
    generation_cluster,
    generator_catalog,
)
from tests.fixtures.tiny_generator import TINY_GENERATOR

pytest.importorskip("openvino_genai")

from tests.generation.conftest import Reference

PATH_ID = TINY_GENERATOR.replace("/", "__")
PROMPTS = ["hello world", "The quick brown fox"]
MESSAGES: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say yes or no."}]
N = 24


class Built:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog, self.hf = generator_catalog(root)
        self.cancelled = root / "cancelled"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("gen-cluster"))


@pytest.fixture(scope="module")
def cluster(built: Built) -> Iterator[LocalCluster]:
    with generation_cluster(built.root, built.catalog) as running:
        yield running


@pytest.fixture(scope="module")
def reference(built: Built) -> Reference:
    return Reference(built.hf)


def sse_events(lines: Iterator[str]) -> list[dict[str, Any]]:
    """The stream's JSON events; it must end with [DONE]."""
    data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    assert data and data[-1] == "[DONE]", data[-3:]
    return [json.loads(d) for d in data[:-1]]


def stream(url: str, path: str, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return response, sse_events(response.iter_lines())


@pytest.mark.parametrize("prompt", PROMPTS)
def test_generate_through_the_gateway_equals_greedy(cluster: LocalCluster, reference: Reference, prompt: str) -> None:
    expected, ids = reference.greedy(reference.ids_of(prompt), N)
    whole = httpx.post(
        f"{cluster.url}/v1/generate/{PATH_ID}", json={"prompt": prompt, "max_new_tokens": N}, timeout=120
    )
    assert whole.status_code == 200, whole.text
    assert whole.headers["x-sift-worker"] == WORKER
    body = whole.json()
    assert body["text"] == expected and body["model"] == TINY_GENERATOR
    assert body["usage"]["completion_tokens"] == len(ids)

    response, events = stream(cluster.url, f"/v1/generate/{PATH_ID}", {"prompt": prompt, "max_new_tokens": N})
    assert response.headers["x-sift-worker"] == WORKER
    assert "".join(e["text_delta"] for e in events) == expected
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["done"] is True and events[-1]["usage"] == body["usage"]
    assert all(e["done"] is False for e in events[:-1])


def test_openai_routes_through_the_gateway_equal_greedy(cluster: LocalCluster, reference: Reference) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{cluster.url}/v1", api_key="unused", max_retries=0)
    expected, ids = reference.greedy(reference.chat_ids(MESSAGES), N)
    chat = client.chat.completions.create(model=TINY_GENERATOR, messages=MESSAGES, max_tokens=N)
    assert chat.choices[0].message.content == expected
    assert chat.usage is not None and chat.usage.completion_tokens == len(ids)
    chunks = list(
        client.chat.completions.create(
            model=TINY_GENERATOR,
            messages=MESSAGES,
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(ids)

    prompt = PROMPTS[1]
    expected_text, _ = reference.greedy(reference.ids_of(prompt), N)
    completion = client.completions.create(model=TINY_GENERATOR, prompt=prompt, max_tokens=N)
    assert completion.choices[0].text == expected_text
    streamed = list(client.completions.create(model=TINY_GENERATOR, prompt=prompt, max_tokens=N, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == expected_text

    response = httpx.post(
        f"{cluster.url}/v1/responses",
        json={"model": TINY_GENERATOR, "input": MESSAGES[1]["content"], "max_output_tokens": N},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    user_only, _ = reference.greedy(reference.chat_ids([MESSAGES[1]]), N)
    assert response.json()["output"][0]["content"][0]["text"] == user_only


def test_bad_input_is_answered_by_the_gateway_path_in_the_routes_envelope(cluster: LocalCluster) -> None:
    over = httpx.post(
        f"{cluster.url}/v1/chat/completions",
        json={"model": TINY_GENERATOR, "messages": MESSAGES, "max_tokens": CAP + 1, "stream": True},
        timeout=60,
    )
    assert over.status_code == 400, over.text
    assert over.json()["error"]["param"] == "max_tokens"
    unknown = httpx.post(f"{cluster.url}/v1/generate/{PATH_ID}", json={"prompt": "x", "bogus": 1}, timeout=60)
    assert unknown.status_code in (400, 422), unknown.text


def test_chunks_are_relayed_in_order_as_they_are_made(cluster: LocalCluster) -> None:
    # The paced twin makes a token every STEP_MS at least: a gateway that held the
    # answer back until its end would hand over the first and the last event together.
    arrivals: list[float] = []
    events: list[dict[str, Any]] = []
    body = {"prompt": PROMPTS[0], "max_new_tokens": 60, "stream": True}
    with httpx.stream("POST", f"{cluster.url}/v1/generate/{SLOW_GENERATOR}", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[len("data: ") :]))
                arrivals.append(time.monotonic())
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["done"] is True and events[-1]["usage"]["completion_tokens"] == 60
    # Between the first event and the last, at least the pacing of the steps between them.
    assert arrivals[-1] - arrivals[0] >= 0.5 * STEP_MS / 1000 * (60 - 10)


def test_a_client_that_goes_away_cancels_the_run_on_the_worker(cluster: LocalCluster, built: Built) -> None:
    before = built.cancelled.read_text().split() if built.cancelled.exists() else []
    body = {"prompt": PROMPTS[0], "max_new_tokens": CAP, "stream": True}
    with httpx.stream("POST", f"{cluster.url}/v1/generate/{SLOW_GENERATOR}", json=body, timeout=120) as response:
        lines = response.iter_lines()
        seen = 0
        for line in lines:
            seen += line.startswith("data: {")
            if seen == 3:
                break  # and close the connection
    wait_for(lambda: built.cancelled.exists() and len(built.cancelled.read_text().split()) > len(before), "cancel", 30)
    made = int(built.cancelled.read_text().split()[-1])
    assert made < CAP  # the engine's run was closed early, not generated for nobody
    # The worker ended its stream and acknowledged the message: nothing held, nothing waits.
    wait_for(lambda: consumer_state(cluster.nats_url, SLOW_GENERATOR) == (0, 0), "the message acknowledged", 30)


def test_a_worker_killed_mid_stream_ends_it_with_the_error_event(cluster: LocalCluster, reference: Reference) -> None:
    # Last in this module: it kills the module's only worker.
    expected, _ = reference.greedy(reference.ids_of(PROMPTS[0]), CAP)
    body = {"prompt": PROMPTS[0], "max_new_tokens": CAP, "stream": True}
    worker = next(p for p in cluster.workers if p.name == WORKER)
    with httpx.stream("POST", f"{cluster.url}/v1/generate/{SLOW_GENERATOR}", json=body, timeout=120) as response:
        assert response.status_code == 200
        data: list[str] = []
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data.append(line[len("data: ") :])
            if len(data) == 3:
                worker.process.send_signal(signal.SIGKILL)
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    assert "error" in events[-1], events[-1]
    assert events[-1]["error"]["code"] == "INFERENCE_ERROR"
    assert all("error" not in e and e["done"] is False for e in events[:-1])
    text = "".join(e["text_delta"] for e in events[:-1])
    assert expected.startswith(text) and len(text) < len(expected)
