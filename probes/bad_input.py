"""Bad-input fuzz against a real server: hand cases, seeded random mutations of
valid bodies on the four POST routes, and (if installed) a schemathesis run over
/openapi.json. Passes when no answer is a 5xx other than a 503 with Retry-After,
and every 4xx carries its family's envelope.

    .venv/bin/python -m probes.bad_input [--mutations 400] [--schemathesis-examples 30]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack

from probes.common import MINILM, start_server

ROUTES = {
    "encode": f"/v1/encode/{MINILM}",
    "score": f"/v1/score/{MINILM}",
    "extract": f"/v1/extract/{MINILM}",
    "openai": "/v1/embeddings",
}
VALID: dict[str, Any] = {
    "encode": {"items": [{"id": "a", "text": "hello world"}], "params": {"options": {"is_query": True}}},
    "score": {"query": {"text": "q"}, "items": [{"text": "d"}]},
    "extract": {"items": [{"text": "Ada in London"}], "params": {"labels": ["person"]}},
    "openai": {"model": MINILM, "input": ["a", "b"], "encoding_format": "float"},
}
JSON = {"Content-Type": "application/json", "Accept": "application/json"}
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
DEEP = 100_000
Case = tuple[str, str, str, bytes, dict[str, str]]  # name, method, path, body, headers


def hand_cases() -> Iterator[Case]:
    enc, oa = ROUTES["encode"], ROUTES["openai"]
    for route, path in ROUTES.items():
        deep_json = b'{"items":[{"text":"a","metadata":{"x":' + b"[" * DEEP + b"]" * DEEP + b"}}]}"
        yield f"{route}: deep JSON", "POST", path, deep_json, JSON
        yield f"{route}: deep msgpack", "POST", path, b"\x81\xa5items" + b"\x91" * DEEP + b"\x90", MSGPACK
        yield f"{route}: msgpack garbage", "POST", path, bytes(range(256)), MSGPACK
        yield f"{route}: invalid UTF-8", "POST", path, b'{"items": [{"text": "\xff\xfe"}], "model": "\xff"}', JSON
        yield f"{route}: empty body", "POST", path, b"", JSON
        yield f"{route}: JSON null", "POST", path, b"null", JSON
        yield f"{route}: JSON list", "POST", path, b"[1,2]", JSON
        surrogate = b'{"items":[{"text":"a\\ud800b"}],"model":"m","input":"a\\ud800"}'
        yield f"{route}: lone surrogate", "POST", path, surrogate, JSON
        yield f"{route}: NaN", "POST", path, b'{"items":[{"text":"a"}],"params":{"options":{"threshold":NaN}}}', JSON
        yield f"{route}: GET", "GET", path, b"", {}
        yield f"{route}: text/plain", "POST", path, json.dumps(VALID[route]).encode(), {"Content-Type": "text/plain"}
    for value in ("NaN", "Infinity", "-Infinity", "1e400", "1.5", '"384"', "-1", "true", "[384]"):
        raw = f'{{"model":"{MINILM}","input":"a","dimensions":{value}}}'.encode()
        yield f"openai: dimensions {value}", "POST", oa, raw, JSON
    openai_bodies: list[dict[str, Any]] = [
        {},
        {"model": MINILM},
        {"input": "a"},
        {"model": MINILM, "input": 5},
        {"model": MINILM, "input": [[1, 2]]},
        {"model": MINILM, "input": []},
        {"model": MINILM, "input": "a", "encoding_format": "hex"},
        {"model": MINILM, "input": "a", "user": 5},
        {"model": 5, "input": "a"},
        {"model": "x" * 8_000_000, "input": "a"},
        {"model": "no/such", "input": "a"},
        {"model": MINILM, "input": [None]},
    ]
    for body in openai_bodies:
        yield f"openai: {str(body)[:60]}", "POST", oa, json.dumps(body).encode(), JSON
    for body in (
        {"items": [{"text": "x"}], "params": {"instruction": "i" * 3_000_000}},
        {"items": [{"text": "x", "metadata": {"k": "v" * 3_000_000}}]},
        {"items": [{"text": "x"}] * 513},
        {"items": [{"text": 5}]},
        {"items": [{"id": 5, "text": "x"}]},
        {"items": [{"text": "x"}], "params": {"options": {"overflow_policy": 5}}},
        {"items": [{"text": "x"}], "params": {"output_dtype": {"a": 1}}},
        {"items": [{"text": "x"}], "params": {"options": {"profile": ["a"]}}},
        {"items": [{"text": "word " * 400_000}], "params": {"options": {"overflow_policy": "error"}}},
    ):
        yield f"encode: {str(body)[:60]}", "POST", enc, json.dumps(body).encode(), JSON


def mutations(count: int, seed: int) -> Iterator[Case]:
    rng = random.Random(seed)
    values: list[Any] = [None, True, 0, -1, 2**70, 1.5, "", "x" * 1000, [], {}, [[]], {"a": [1]}, "\u0000", "é" * 10]
    for index in range(count):
        route = rng.choice(list(ROUTES))
        body = json.loads(json.dumps(VALID[route]))
        kind = rng.randrange(4)
        if kind == 0:  # replace a random field (top level or nested) with a random value
            target = body
            key = rng.choice(list(target))
            if isinstance(target[key], dict) and target[key] and rng.random() < 0.5:
                target = target[key]
                key = rng.choice(list(target))
            target[key] = rng.choice(values)
            raw, headers = json.dumps(body).encode(), JSON
        elif kind == 1:  # truncate the JSON text
            text = json.dumps(body).encode()
            raw, headers = text[: rng.randrange(len(text))], JSON
        elif kind == 2:  # flip bytes of the msgpack form
            packed = bytearray(msgpack.packb(body))
            for _ in range(rng.randint(1, 4)):
                packed[rng.randrange(len(packed))] = rng.randrange(256)
            raw, headers = bytes(packed), MSGPACK
        else:  # drop a required field
            body.pop(rng.choice(list(body)))
            raw, headers = json.dumps(body).encode(), JSON
        yield f"mutation {index} ({route}, kind {kind})", "POST", ROUTES[route], raw, headers


def check(response: httpx.Response, path: str) -> str | None:
    """A problem with this answer, or None."""
    status = response.status_code
    if status >= 500 and not (status == 503 and "retry-after" in response.headers):
        return f"{status}: {response.text[:200]}"
    if status < 400:
        return None
    try:
        body = response.json()
    except ValueError:
        return f"{status} without a JSON body: {response.text[:100]}"
    if path == ROUTES["openai"]:
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or not {"message", "type", "param", "code"} <= set(error):
            return f"{status} without the OpenAI envelope: {str(body)[:200]}"
        if error["code"] != str(error["code"]).lower():
            return f"{status} upper-case OpenAI code {error['code']}"
    elif status not in (404, 405):  # routing errors keep FastAPI's {"detail": "..."}
        detail = body.get("detail") if isinstance(body, dict) else None
        if not isinstance(detail, dict) or "code" not in detail or "x-sie-error-code" not in response.headers:
            return f"{status} without the native envelope: {str(body)[:200]}"
    return None


def declared_too_large(url: str, path: str) -> tuple[int, bytes]:
    """Headers declaring a 40 MB body, then 2 bytes: the answer must be a 413 before reading."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {40 * 2**20}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"{}")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


def run_schemathesis(url: str, examples: int) -> tuple[int, str]:
    cli = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    if not Path(cli).exists():
        return -1, "schemathesis not installed (pip install schemathesis to include it)"
    command = [
        cli,
        "run",
        f"{url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        str(examples),
        "--url",
        url,
    ]
    # In a scratch folder: schemathesis keeps a cache (.schemathesis/) in its working directory.
    with tempfile.TemporaryDirectory(prefix="sift-schemathesis-") as scratch:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=scratch)
    return done.returncode, (done.stdout + done.stderr)[-3000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mutations", type=int, default=400)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--schemathesis-examples", type=int, default=30)
    args = parser.parse_args()
    problems: list[str] = []
    statuses: Counter[int] = Counter()
    with start_server() as server, httpx.Client(base_url=server.url, timeout=60) as client:
        cases = [*hand_cases(), *mutations(args.mutations, args.seed)]
        for name, method, path, raw, headers in cases:
            response = client.request(method, path, content=raw if method == "POST" else None, headers=headers)
            statuses[response.status_code] += 1
            problem = check(response, path)
            if problem:
                problems.append(f"{name}: {problem}")
        for path in (ROUTES["encode"], ROUTES["openai"]):
            status, answer = declared_too_large(server.url, path)
            statuses[status] += 1
            if status != 413:
                problems.append(f"40 MB declared on {path}: {answer[:200]!r}")
        assert client.get("/healthz").status_code == 200
        code, report = run_schemathesis(server.url, args.schemathesis_examples)
        tracebacks = server.log_tail(100_000).count("Traceback")
    print(
        f"{len(cases)} cases: statuses {dict(sorted(statuses.items()))}; problems {len(problems)}; "
        f"tracebacks in the server log {tracebacks}"
    )
    for problem in problems[:40]:
        print("  PROBLEM", problem)
    print(f"schemathesis: exit {code}\n{report}" if code != -1 else report)
    return 1 if problems or tracebacks or code not in (0, -1) else 0


if __name__ == "__main__":
    raise SystemExit(main())
