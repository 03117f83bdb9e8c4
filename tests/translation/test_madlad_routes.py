"""The ``ctranslate2`` generation adapter (madlad400's engine in the reference) against a
real ``sift serve``: greedy answers at fp32 through the routes equal transformers' own
greedy ``generate`` of the tiny random T5 (tests/fixtures/tiny_translator.py), whole and
streamed, alone and concurrent (batched); what CTranslate2 cannot do (sampling,
grammars, chat without a template) and bad input answered 400 in the envelope before
any work; the model listed in ``/v1/models``; the transformers folder converted once into
the artifact cache, and a CTranslate2 folder served as it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_translator import TINY_TRANSLATOR, build_tiny_translator, catalog_entry

pytest.importorskip("ctranslate2")

PATH_ID = TINY_TRANSLATOR.replace("/", "__")
PROMPTS = ["<2de> I love the small house", "<2fr> the cat is small and I love you", "hello world", "<2en> Katze"]
N = 20
CAP = 48
CONTEXT = 32


class Reference:
    """transformers' own greedy ``generate`` at fp32: the answers the routes must equal."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoTokenizer, T5ForConditionalGeneration

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = T5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()

    def ids_of(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def greedy(self, prompt: str, max_new_tokens: int) -> tuple[str, list[int], str]:
        import torch

        inputs = torch.tensor([self.ids_of(prompt)])
        with torch.no_grad():
            out = self.model.generate(inputs, max_new_tokens=max_new_tokens, do_sample=False)
        ids = out[0, 1:].tolist()  # after the decoder's start token
        ended = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
        return text, ids[:-1] if ended else ids, "stop" if ended else "length"


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_translator(tmp_path_factory.mktemp("translator") / "hf")


@pytest.fixture(scope="module")
def reference(hf_folder: Path) -> Reference:
    return Reference(hf_folder)


@pytest.fixture(scope="module")
def server(hf_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("translator-serve")
    catalog = root / "catalog"
    catalog.mkdir()
    options = f"max_sequence_length: {CONTEXT}\noptions:\n  max_new_tokens_cap: {CAP}\n"
    (catalog / "translator.yaml").write_text(catalog_entry(TINY_TRANSLATOR, hf_folder, options))
    cache = root / "artifacts"
    proc = start_server(
        ["--catalog", str(catalog), "--preload", TINY_TRANSLATOR],
        root / "server.log",
        env={"SIFT_CACHE_DIR": str(cache)},
        # The first start converts in a child at nice 19: slow on a busy machine.
        ready_timeout=600.0,
    )
    proc.cache = cache  # type: ignore[attr-defined]
    yield proc
    proc.stop()


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


def sse_payloads(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", lines[-3:]
    return [json.loads(line) for line in lines[:-1]]


def test_the_reference_answers_are_not_degenerate(reference: Reference) -> None:
    # A random model that wrote one token over and over would make parity cheap.
    answers = [reference.greedy(prompt, N)[1] for prompt in PROMPTS]
    assert all(len(set(ids)) > 5 for ids in answers)
    assert len({tuple(ids) for ids in answers}) == len(PROMPTS)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_generate_equals_transformers_greedy(server: ServerProcess, reference: Reference, prompt: str) -> None:
    expected, ids, finish = reference.greedy(prompt, N)
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": prompt, "max_new_tokens": N, "temperature": 0})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["text"] == expected
    assert body["finish_reason"] == finish
    prompt_tokens = len(reference.ids_of(prompt))
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(ids),
        "total_tokens": prompt_tokens + len(ids),
    }

    with httpx.stream(
        "POST", f"{server.url}/v1/generate/{PATH_ID}", json={"prompt": prompt, "max_new_tokens": N, "stream": True}
    ) as streamed:
        events = sse_payloads(streamed)
    assert "".join(e["text_delta"] for e in events) == expected
    assert events[-1]["done"] is True and events[-1]["usage"] == body["usage"]
    assert len(events) > 2  # token by token, not one piece at the end


def test_completions_equal_transformers_greedy_whole_and_streamed(server: ServerProcess, reference: Reference) -> None:
    expected, ids, finish = reference.greedy(PROMPTS[1], 12)
    body = {"model": TINY_TRANSLATOR, "prompt": PROMPTS[1], "max_tokens": 12}
    answer = post(server, "/v1/completions", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] == expected
    assert answer.json()["choices"][0]["finish_reason"] == finish
    assert answer.json()["usage"]["completion_tokens"] == len(ids)
    streamed_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=streamed_body) as streamed:
        events = sse_payloads(streamed)
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == expected
    assert events[-1]["usage"] == answer.json()["usage"]


def test_concurrent_requests_batched_answer_as_alone(server: ServerProcess, reference: Reference) -> None:
    lengths = [N, 7, 13, N, 3, 9, N, 5]
    asked = [(PROMPTS[i % len(PROMPTS)], n) for i, n in enumerate(lengths)]
    expected = [reference.greedy(prompt, n)[0] for prompt, n in asked]

    def one(item: tuple[str, int]) -> str:
        response = post(server, f"/v1/generate/{PATH_ID}", {"prompt": item[0], "max_new_tokens": item[1]})
        assert response.status_code == 200, response.text
        return str(response.json()["text"])

    with ThreadPoolExecutor(len(asked)) as pool:
        assert list(pool.map(one, asked)) == expected


def test_stop_sequences_end_the_answer(server: ServerProcess, reference: Reference) -> None:
    expected, _, _ = reference.greedy(PROMPTS[0], N)
    stop = expected[len(expected) // 2 : len(expected) // 2 + 2]
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": PROMPTS[0], "max_new_tokens": N, "stop": [stop]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == expected[: expected.index(stop)]
    assert answer.json()["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (f"/v1/generate/{PATH_ID}", {"prompt": "hello", "max_new_tokens": 4, "temperature": 0.7}, "temperature"),
        (f"/v1/generate/{PATH_ID}", {"prompt": "hello", "max_new_tokens": 4, "top_p": 0.5}, "top_p"),
        (
            f"/v1/generate/{PATH_ID}",
            {"prompt": "hello", "max_new_tokens": 4, "grammar": {"regex": "[a-z]+"}},
            "grammar",
        ),
        (f"/v1/generate/{PATH_ID}", {"prompt": "hello", "max_new_tokens": CAP + 1}, "max_new_tokens"),
        (f"/v1/generate/{PATH_ID}", {"prompt": "hello", "max_new_tokens": 4, "nonsense": 1}, None),
        (f"/v1/generate/{PATH_ID}", {"prompt": "", "max_new_tokens": 4}, "prompt"),
        (
            "/v1/completions",
            {"model": TINY_TRANSLATOR, "prompt": "hi", "max_tokens": 4, "temperature": 1},
            "temperature",
        ),
    ],
)
def test_what_the_engine_cannot_do_is_a_400_before_any_work(
    server: ServerProcess, path: str, body: dict[str, Any], param: str | None
) -> None:
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()
    envelope = error.get("error", error.get("detail", error))
    assert isinstance(envelope, dict)
    text = json.dumps(envelope)
    if param is not None:
        assert param in text


def test_chat_without_a_template_is_a_400(server: ServerProcess) -> None:
    body = {"model": TINY_TRANSLATOR, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 400, answer.text
    assert "chat template" in answer.text


def test_a_prompt_over_the_context_is_refused_and_the_answer_does_not_count_against_it(
    server: ServerProcess, reference: Reference
) -> None:
    long_prompt = " ".join(["the small house"] * 20)
    assert len(reference.ids_of(long_prompt)) > CONTEXT
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": long_prompt, "max_new_tokens": 4})
    assert answer.status_code == 400, answer.text
    assert "INPUT_TOO_LONG" in answer.text
    # An encoder-decoder's answer is the decoder's: prompt + answer may exceed the prompt's context.
    fits = " ".join(["the small house"] * 8)
    assert CONTEXT // 2 < len(reference.ids_of(fits)) <= CONTEXT
    answer = post(server, f"/v1/generate/{PATH_ID}", {"prompt": fits, "max_new_tokens": CAP})
    assert answer.status_code == 200, answer.text


def test_listed_in_models_and_converted_once_into_the_cache(server: ServerProcess) -> None:
    listed = httpx.get(f"{server.url}/v1/models/{TINY_TRANSLATOR}", timeout=30).json()
    assert listed["tasks"] == ["generate"] and listed["outputs"] == ["text"] and listed["loaded"] is True
    ids = {m["name"] for m in httpx.get(f"{server.url}/v1/models", timeout=30).json()["models"]}
    assert TINY_TRANSLATOR in ids
    converted = list((server.cache / "ctranslate2").glob("*/model.bin"))  # type: ignore[attr-defined]
    assert len(converted) == 1


def test_a_ctranslate2_folder_is_served_as_it_is(hf_folder: Path, reference: Reference, tmp_path: Path) -> None:
    import shutil

    from ctranslate2.converters import TransformersConverter

    folder = tmp_path / "ct2"
    TransformersConverter(str(hf_folder)).convert(str(folder), quantization="float32")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_folder / name, folder / name)
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "t.yaml").write_text(catalog_entry(TINY_TRANSLATOR, folder))
    cache = tmp_path / "artifacts"
    proc = start_server(
        ["--catalog", str(catalog), "--preload", TINY_TRANSLATOR],
        tmp_path / "server.log",
        env={"SIFT_CACHE_DIR": str(cache)},
    )
    try:
        answer = post(proc, f"/v1/generate/{PATH_ID}", {"prompt": PROMPTS[0], "max_new_tokens": N})
        assert answer.status_code == 200, answer.text
        assert answer.json()["text"] == reference.greedy(PROMPTS[0], N)[0]
        assert not list(cache.glob("ctranslate2/*/model.bin"))
    finally:
        proc.stop()


def test_an_answer_that_ends_by_itself_finishes_stop(tmp_path: Path) -> None:
    import asyncio

    from sift_server.adapters.base import LoadContext
    from sift_server.generation.ctranslate2_adapter import CTranslate2GenerationAdapter
    from sift_server.generation.params import Sampling

    folder = build_tiny_translator(tmp_path / "hf", end_after=47)  # "hello world" would write 47 fifth
    expected, ids, finish = Reference(folder).greedy(PROMPTS[2], N)
    assert finish == "stop" and 0 < len(ids) < N
    ctx = LoadContext(path=folder, options={}, max_sequence_length=None, torch_threads=1, cache_dir=tmp_path / "c")
    adapter = CTranslate2GenerationAdapter.load(ctx)

    async def run() -> list[tuple[tuple[int, ...], str | None]]:
        return [(s.ids, s.finish) async for s in adapter.engine.generate(adapter.encode(PROMPTS[2]), Sampling(N))]

    try:
        steps = asyncio.run(run())
    finally:
        adapter.close()
    assert [i for s in steps for i in s[0]] == ids
    assert steps[-1] == ((), "stop")
    assert adapter.decode(ids) == expected


def test_the_released_sie_sdk_generates_unchanged(server: ServerProcess, reference: Reference) -> None:
    import subprocess

    from tests.compat.conftest import COMPAT_PYTHON, require_venv

    require_venv()
    driver = Path(__file__).parents[1] / "generation" / "sie_generation_driver.py"
    messages = [{"role": "user", "content": "hi"}]
    spec = {"model": TINY_TRANSLATOR, "prompt": PROMPTS[0], "messages": messages, "max_new_tokens": N}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(driver), server.url, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    expected, ids, _ = reference.greedy(PROMPTS[0], N)
    assert "ok" in answers["generate"], answers["generate"]
    assert answers["generate"]["ok"]["text"] == expected
    assert answers["generate"]["ok"]["usage"]["completion_tokens"] == len(ids)
    chunks = answers["stream_generate"]["ok"]
    assert "".join(c.get("text_delta", "") for c in chunks) == expected
    # No chat template: the SDK raises the server's 400.
    assert "error" in answers["chat_completions"] and "chat template" in answers["chat_completions"]["error"]
