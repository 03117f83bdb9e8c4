"""A remote generation model (adapter ``openai-remote``) against real upstreams: a
second ``sift serve`` serving the tiny generator (answers equal the upstream's own,
through every route, streamed and whole; its key sent from the environment variable
the entry names and never logged), and a misbehaving HTTP server standing in for an
upstream that fails, breaks mid-answer, hangs or is busy: each a clear envelope."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.processes import free_port
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_generator import TINY_GENERATOR, catalog_entry
from tests.generation.conftest import Generator
from tests.generation.test_routes import MESSAGES, sse_payloads

KEY = "upstream-key-4e1f9c"
REMOTE = "remote/tiny"
CAP = 64


class Misbehaving(BaseHTTPRequestHandler):
    """An upstream that answers as the request's ``model`` says: ``fails`` (500),
    ``busy`` (429), ``breaks`` (one chunk, then an error event), ``cuts`` (one chunk,
    then the connection ends without [DONE]), ``hangs`` (never answers)."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        behaviour = body["model"]
        if behaviour in ("fails", "busy"):
            payload = json.dumps({"error": {"message": f"the upstream {behaviour}", "code": "x"}}).encode()
            self.send_response(500 if behaviour == "fails" else 429)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if behaviour == "hangs":
            time.sleep(10)
            return
        if behaviour == "trickles":
            self.trickle()
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunk = {"choices": [{"index": 0, "text": "partial", "delta": {"content": "partial"}, "finish_reason": None}]}
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if behaviour == "breaks":
            self.wfile.write(b'data: {"error": {"message": "engine died", "code": "boom"}}\n\n')
        self.wfile.flush()
        self.close_connection = True

    def trickle(self) -> None:
        """A chunk every 50 ms for a minute; notes when its reader (the front) hangs up."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}\n\n'
        try:
            for _ in range(1200):
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            HUNG_UP.set()
        self.close_connection = True


# Set when the trickling upstream finds its reader gone.
HUNG_UP = threading.Event()


@pytest.fixture(scope="module")
def upstream(generator: Generator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("remote-upstream")
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "generator.yaml").write_text(
        catalog_entry(TINY_GENERATOR, generator.ov, "options:\n  max_new_tokens_cap: 240\n")
    )
    proc = start_server(
        ["--catalog", str(catalog), "--preload", TINY_GENERATOR], root / "upstream.log", env={"SIFT_API_KEY": KEY}
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def misbehaving() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def remote_entry(name: str, base_url: str, model: str, *, key_env: str | None = None, read_timeout: float = 30) -> str:
    key = f"  api_key_env: {key_env}\n" if key_env else ""
    return (
        f"name: {name}\nadapter: openai-remote\ntasks: [generate]\n"
        f"remote:\n  base_url: {base_url}\n  model: {model}\n{key}  read_timeout_s: {read_timeout}\n"
        f"options:\n  max_new_tokens_cap: {CAP}\n"
    )


ENTRIES = {
    "remote/wrong-key": ("upstream", TINY_GENERATOR, "WRONG_KEY"),
    "remote/unreachable": ("closed", "any", None),
    "remote/fails": ("misbehaving", "fails", None),
    "remote/busy": ("misbehaving", "busy", None),
    "remote/breaks": ("misbehaving", "breaks", None),
    "remote/cuts": ("misbehaving", "cuts", None),
    "remote/hangs": ("misbehaving", "hangs", None),
    "remote/trickles": ("misbehaving", "trickles", None),
}


@pytest.fixture(scope="module")
def front(
    upstream: ServerProcess, misbehaving: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("remote-front")
    catalog = root / "catalog"
    catalog.mkdir()
    urls = {
        "upstream": f"{upstream.url}/v1",
        "misbehaving": misbehaving,
        "closed": f"http://127.0.0.1:{free_port()}/v1",
    }
    (catalog / "tiny.yaml").write_text(remote_entry(REMOTE, urls["upstream"], TINY_GENERATOR, key_env="REMOTE_KEY"))
    preload = ["--preload", REMOTE]
    for i, (name, (where, model, key_env)) in enumerate(ENTRIES.items()):
        (catalog / f"e{i}.yaml").write_text(remote_entry(name, urls[where], model, key_env=key_env, read_timeout=1))
        preload += ["--preload", name]
    proc = start_server(
        ["--catalog", str(catalog), *preload], root / "front.log", env={"REMOTE_KEY": KEY, "WRONG_KEY": "not-it"}
    )
    yield proc
    proc.stop()


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def both(front: ServerProcess, upstream: ServerProcess, path: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """The same request to the front (naming the remote model) and straight to the upstream."""
    mine = post(
        front,
        path.replace("{m}", REMOTE.replace("/", "__")),
        {**body, **({"model": REMOTE} if "model" in body else {})},
    )
    theirs = httpx.post(
        f"{upstream.url}{path.replace('{m}', TINY_GENERATOR.replace('/', '__'))}",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert mine.status_code == 200, mine.text
    assert theirs.status_code == 200, theirs.text
    return mine.json(), theirs.json()


def streamed(server: ServerProcess, path: str, body: dict[str, Any], key: str | None = None) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.stream("POST", f"{server.url}{path}", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        return sse_payloads(response)


def test_generate_answers_as_the_upstream(front: ServerProcess, upstream: ServerProcess) -> None:
    body = {"prompt": "hello world", "max_new_tokens": 24, "temperature": 0}
    mine, theirs = both(front, upstream, "/v1/generate/{m}", body)
    assert mine["model"] == REMOTE
    assert (mine["text"], mine["finish_reason"], mine["usage"]) == (
        theirs["text"],
        theirs["finish_reason"],
        theirs["usage"],
    )
    events = streamed(front, f"/v1/generate/{REMOTE.replace('/', '__')}", {**body, "stream": True})
    assert "".join(e["text_delta"] for e in events) == theirs["text"]
    assert events[-1]["done"] is True and events[-1]["usage"] == theirs["usage"]
    assert [e["seq"] for e in events] == list(range(len(events)))


def test_chat_completions_and_responses_answer_as_the_upstream(front: ServerProcess, upstream: ServerProcess) -> None:
    body = {"model": TINY_GENERATOR, "messages": MESSAGES, "max_tokens": 20, "stop": ["zz"]}
    mine, theirs = both(front, upstream, "/v1/chat/completions", body)
    assert mine["model"] == REMOTE
    assert mine["choices"][0]["message"] == theirs["choices"][0]["message"]
    assert mine["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
    assert mine["usage"] == theirs["usage"]
    events = streamed(
        front,
        "/v1/chat/completions",
        {**body, "model": REMOTE, "stream": True, "stream_options": {"include_usage": True}},
    )
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == theirs["choices"][0]["message"]["content"]
    assert events[-1]["choices"] == [] and events[-1]["usage"] == theirs["usage"]

    request = {"model": TINY_GENERATOR, "input": "Say yes or no.", "max_output_tokens": 16}
    mine, theirs = both(front, upstream, "/v1/responses", request)
    assert mine["output"][0]["content"][0]["text"] == theirs["output"][0]["content"][0]["text"]
    assert mine["usage"] == theirs["usage"]


def test_completions_answer_as_the_upstream(front: ServerProcess, upstream: ServerProcess) -> None:
    body = {"model": TINY_GENERATOR, "prompt": "The quick brown fox", "max_tokens": 24, "seed": 3}
    mine, theirs = both(front, upstream, "/v1/completions", body)
    assert mine["choices"][0]["text"] == theirs["choices"][0]["text"]
    assert mine["usage"] == theirs["usage"]
    events = streamed(front, "/v1/completions", {**body, "model": REMOTE, "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events) == theirs["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]


def test_structured_output_goes_to_the_upstream(front: ServerProcess, upstream: ServerProcess) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    body = {
        "model": TINY_GENERATOR,
        "messages": MESSAGES,
        "max_tokens": 48,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    }
    mine, theirs = both(front, upstream, "/v1/chat/completions", body)
    assert isinstance(json.loads(mine["choices"][0]["message"]["content"])["answer"], int)
    assert mine["choices"][0]["message"] == theirs["choices"][0]["message"]


def test_the_remote_model_is_listed(front: ServerProcess) -> None:
    listed = httpx.get(f"{front.url}/v1/models/{REMOTE}", timeout=30).json()
    assert listed["tasks"] == ["generate"] and listed["loaded"] is True
    assert listed["routing"] == {"policy": "remote_only", "upstream_kind": "openai"}
    ids = {m["name"] for m in httpx.get(f"{front.url}/v1/models", timeout=30).json()["models"]}
    assert REMOTE in ids


def upstream_requests(upstream: ServerProcess) -> float:
    text = httpx.get(f"{upstream.url}/metrics", timeout=30).text
    pattern = rf'^sie_requests_total{{[^}}]*model="{re.escape(TINY_GENERATOR)}"[^}}]*}} ([0-9.e+]+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": CAP + 1}, "max_tokens"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 8, "bogus": 1}, "bogus"),
        ("/v1/completions", {"prompt": "", "max_tokens": 8}, "prompt"),
        (
            "/v1/chat/completions",
            {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}},
            "response_format",
        ),
        ("/v1/generate/{m}", {"prompt": "hi", "max_new_tokens": 8, "grammar": {"regex": "a+"}}, "grammar"),
    ],
)
def test_bad_input_is_refused_before_the_upstream_is_called(
    front: ServerProcess, upstream: ServerProcess, path: str, body: dict[str, Any], param: str
) -> None:
    before = upstream_requests(upstream)
    url = path.replace("{m}", REMOTE.replace("/", "__"))
    answer = post(front, url, body if "{m}" in path else {**body, "model": REMOTE})
    assert answer.status_code == 400, answer.text
    assert param in answer.text
    assert upstream_requests(upstream) == before


def error_of(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    error = body.get("error", body.get("detail"))
    assert isinstance(error, dict), body
    return error


def test_a_prompt_over_the_upstreams_context_is_its_400(front: ServerProcess) -> None:
    answer = post(front, "/v1/completions", {"model": REMOTE, "prompt": "word " * 400, "max_tokens": 8})
    assert answer.status_code == 400, answer.text
    assert error_of(answer)["code"] == "upstream_rejected"  # the OpenAI routes' envelope spells codes lower case
    assert "context" in error_of(answer)["message"]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("remote/wrong-key", 502, "UPSTREAM_ERROR"),
        ("remote/unreachable", 502, "UPSTREAM_UNREACHABLE"),
        ("remote/fails", 502, "UPSTREAM_ERROR"),
        ("remote/busy", 503, "UPSTREAM_BUSY"),
        ("remote/hangs", 504, "UPSTREAM_TIMEOUT"),
        ("remote/breaks", 502, "UPSTREAM_ERROR"),
        ("remote/cuts", 502, "UPSTREAM_ERROR"),
    ],
)
def test_an_upstream_failure_is_a_clear_envelope(front: ServerProcess, model: str, status: int, code: str) -> None:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 8}
    answer = post(front, "/v1/chat/completions", body)
    assert answer.status_code == status, answer.text
    assert error_of(answer)["code"] == code.lower()  # the OpenAI routes' envelope spells codes lower case
    with httpx.stream(
        "POST", f"{front.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60
    ) as response:
        if model in ("remote/breaks", "remote/cuts"):
            # It failed after text went out: the stream's terminal error event, then [DONE].
            assert response.status_code == 200
            events = sse_payloads(response)
            assert events[1]["choices"][0]["delta"]["content"] == "partial"
            assert events[-1]["error"]["code"] == code
        else:
            # It failed before any text: the status says so, not a 200 stream.
            response.read()
            assert response.status_code == status
            assert error_of(response)["code"] == code.lower()
    if status == 503:
        assert answer.headers["retry-after"] == "1"


def test_the_key_comes_from_the_environment_and_is_never_logged(front: ServerProcess, upstream: ServerProcess) -> None:
    # The upstream requires KEY (its --api-key): the front's answers above prove it sent it.
    refused = httpx.post(f"{upstream.url}/v1/completions", json={"model": TINY_GENERATOR, "prompt": "hi"}, timeout=30)
    assert refused.status_code == 401
    post(front, "/v1/chat/completions", {"model": "remote/wrong-key", "messages": MESSAGES, "max_tokens": 4})
    assert KEY not in front.log()
    assert "not-it" not in front.log()


def test_a_bad_remote_entry_is_refused_at_start(tmp_path: Path) -> None:
    from sift_server.registry.catalog import CatalogError, load_spec

    for remote, why in [
        ("  base_url: ftp://x/v1\n  model: m\n", "http or https"),
        ("  base_url: http://user:pw@x/v1\n  model: m\n", "credentials"),
        ("  base_url: http://x/v1\n  model: m\n  api_key_env: 'not a name'\n", "api_key_env"),
    ]:
        path = tmp_path / "bad.yaml"
        path.write_text(f"name: r\nadapter: openai-remote\ntasks: [generate]\nremote:\n{remote}")
        with pytest.raises(CatalogError, match=why):
            load_spec(path)
        assert "pw" not in why
    path = tmp_path / "both.yaml"
    head = "name: r\nadapter: openai-remote\ntasks: [generate]\n"
    path.write_text(head + "source:\n  path: /x\nremote:\n  base_url: http://x\n  model: m\n")
    with pytest.raises(CatalogError, match="not 'source'"):
        load_spec(path)


def test_the_native_route_says_an_upstream_failure_in_its_own_envelope(front: ServerProcess) -> None:
    body = {"prompt": "hi", "max_new_tokens": 4}
    answer = post(front, "/v1/generate/remote__unreachable", body)
    assert answer.status_code == 502, answer.text
    assert error_of(answer)["code"] == "UPSTREAM_UNREACHABLE"
    with httpx.stream("POST", f"{front.url}/v1/generate/remote__breaks", json={**body, "stream": True}) as response:
        events = sse_payloads(response)
    assert events[0]["text_delta"] == "partial"
    assert events[-1]["error"]["code"] == "UPSTREAM_ERROR" and "engine died" in events[-1]["error"]["message"]


def front_metric(front: ServerProcess, name: str, model: str, reason: str | None = None) -> float:
    text = httpx.get(f"{front.url}/metrics", timeout=30).text
    labels = f'model="{model}"' + (f',reason="{reason}"' if reason else "")
    found = re.search(rf"^{name}{{{labels}}} ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_client_that_goes_away_cancels_the_upstream_call(front: ServerProcess) -> None:
    model = "remote/trickles"
    HUNG_UP.clear()
    before = front_metric(front, "sift_generation_ended_total", model, "cancelled")
    body = {"model": model, "messages": MESSAGES, "max_tokens": 8, "stream": True}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{front.url}/v1/chat/completions", json=body) as response,
    ):
        lines = response.iter_lines()
        assert next(line for line in lines if '"x"' in line)
        assert front_metric(front, "sift_generation_active", model) == 1
    # The client hung up: the front closes its upstream connection, long before the upstream's minute is over.
    assert HUNG_UP.wait(15)
    deadline = time.monotonic() + 15
    while front_metric(front, "sift_generation_ended_total", model, "cancelled") == before:
        assert time.monotonic() < deadline, "the front never counted the generation as cancelled"
        time.sleep(0.1)
    assert front_metric(front, "sift_generation_active", model) == 0
