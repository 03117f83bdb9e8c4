"""``POST /v1/audio/transcriptions`` in process: greedy answers at fp32 equal to
transformers' own ``generate`` on a tiny random Whisper (tests/fixtures/tiny_whisper.py),
every ``response_format``, batched requests answered as alone, and bad audio refused in
the OpenAI envelope without disturbing a request in flight."""

from __future__ import annotations

import asyncio
import io
import wave
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.service.audio import AudioLimits
from tests.api.inprocess import Client, MakeClient, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_whisper import build_tiny_whisper

WHISPER = "tiny/whisper"
ROUTE = "/v1/audio/transcriptions"


def wav_bytes(seconds: float, *, rate: int = 16_000, freq: float = 440.0, seed: int = 0) -> bytes:
    """A sine with a little seeded noise, 16-bit mono WAV."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.shape[0])
    samples = 0.3 * np.sin(2 * np.pi * freq * t) + 0.02 * noise
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((samples * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper") / "model")


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory: pytest.TempPathFactory, whisper_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("tiny-speech")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "embedder"))
    (catalog / "whisper.yaml").write_text(
        f"name: {WHISPER}\nadapter: whisper\nsource:\n  path: {whisper_dir}\ntasks: [transcribe]\n"
        "backend: torch\nbatching:\n  max_batch_requests: 8\n"
    )
    return catalog


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(preload=[WHISPER])


@pytest.fixture(scope="module")
def reference(whisper_dir: Path) -> Any:
    """transformers' own model, processor and greedy generate at fp32."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    model = WhisperForConditionalGeneration.from_pretrained(whisper_dir, dtype=torch.float32).eval()
    processor = WhisperProcessor.from_pretrained(whisper_dir)

    def generate(audio: bytes, **kwargs: Any) -> Any:
        with wave.open(io.BytesIO(audio)) as clip:
            samples = np.frombuffer(clip.readframes(clip.getnframes()), "<i2").astype(np.float32) / 32768.0
        if samples.shape[0] > 30 * 16_000:  # long-form: the whole clip's features and their mask
            inputs = processor(
                samples,
                sampling_rate=16_000,
                return_tensors="pt",
                truncation=False,
                padding="longest",
                return_attention_mask=True,
            )
            kwargs["attention_mask"] = inputs.attention_mask
            features = inputs.input_features
        else:
            features = processor(samples, sampling_rate=16_000, return_tensors="pt").input_features
        if "prompt" in kwargs:
            kwargs["prompt_ids"] = torch.as_tensor(processor.get_prompt_ids(kwargs.pop("prompt"), return_tensors="pt"))
        with torch.inference_mode():
            return model.generate(features, task="transcribe", do_sample=False, **kwargs)

    def text(tokens: Any) -> str:
        return str(processor.tokenizer.decode(list(tokens), skip_special_tokens=True)).strip()

    return generate, text


async def post(http: Any, audio: bytes | None, **fields: str) -> Any:
    """A multipart form (text fields as parts too, so a form without a file is still multipart)."""
    parts: list[tuple[str, Any]] = [(name, (None, value)) for name, value in {"model": WHISPER, **fields}.items()]
    if audio is not None:
        parts.append(("file", ("clip.wav", audio, "audio/wav")))
    return await http.post(ROUTE, files=parts)


async def test_json_and_text_equal_generate_at_fp32(client: Client, reference: Any) -> None:
    http, _ = client
    generate, text = reference
    audio = wav_bytes(2.0)
    want = text(generate(audio)[0])
    assert want  # the tiny model writes text tokens
    response = await post(http, audio)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"text": want, "usage": {"type": "duration", "seconds": 2.0}}
    plain = await post(http, audio, response_format="text")
    assert plain.status_code == 200, plain.text
    assert plain.headers["content-type"].startswith("text/plain")
    assert plain.text == want + "\n"


async def test_language_and_prompt_are_generates(client: Client, reference: Any) -> None:
    http, _ = client
    generate, text = reference
    audio = wav_bytes(1.5, freq=220.0, seed=3)
    want = text(generate(audio, language="de", prompt="the plan")[0])
    response = await post(http, audio, language="de", prompt="the plan")
    assert response.status_code == 200, response.text
    assert response.json()["text"] == want
    by_name = await post(http, audio, language="german", prompt="the plan")
    assert by_name.json()["text"] == want


async def test_verbose_json_srt_and_vtt_carry_generates_segments(client: Client, reference: Any) -> None:
    http, _ = client
    generate, text = reference
    audio = wav_bytes(3.0, seed=5)
    out = generate(audio, language="en", return_timestamps=True, return_segments=True)
    want = [(round(float(s["start"]), 2), [int(t) for t in s["tokens"]]) for s in out["segments"][0]]
    response = await post(http, audio, language="en", response_format="verbose_json")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["task"] == "transcribe" and answer["language"] == "english"
    assert answer["duration"] == 3.0
    assert answer["text"] == text(out["sequences"][0])
    if want:
        assert [(s["start"], s["tokens"]) for s in answer["segments"]] == want
    else:
        assert [(s["start"], s["end"]) for s in answer["segments"]] == [(0.0, 3.0)]
    srt = await post(http, audio, language="en", response_format="srt")
    assert srt.status_code == 200, srt.text
    assert srt.headers["content-type"].startswith("application/x-subrip")
    lines = srt.text.split("\n")
    assert lines[0] == "1" and " --> " in lines[1] and lines[1].startswith("00:00:")
    vtt = await post(http, audio, language="en", response_format="vtt")
    assert vtt.status_code == 200, vtt.text
    assert vtt.headers["content-type"].startswith("text/vtt")
    assert vtt.text.startswith("WEBVTT\n\n00:00:")
    assert len(answer["segments"]) == srt.text.count(" --> ") == vtt.text.count(" --> ")


async def test_concurrent_clips_are_batched_and_answered_as_alone(client: Client, reference: Any) -> None:
    http, _ = client
    generate, text = reference
    clips = [wav_bytes(1.0 + i * 0.5, freq=200.0 + 90 * i, seed=i) for i in range(4)]
    want = [text(generate(clip)[0]) for clip in clips]
    answers = await asyncio.gather(*(post(http, clip) for clip in clips))
    assert [a.json()["text"] for a in answers] == want


async def test_a_clip_over_30_s_is_transcribed_long_form_as_generate_does(client: Client, reference: Any) -> None:
    http, _ = client
    generate, text = reference
    audio = wav_bytes(34.0, seed=11)
    out = generate(audio, language="en", return_timestamps=True, return_segments=True)
    response = await post(http, audio, language="en", response_format="verbose_json")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["duration"] == 34.0 and answer["text"] == text(out["sequences"][0])
    want = [(round(float(s["start"]), 2), [int(t) for t in s["tokens"]]) for s in out["segments"][0]]
    assert want and [(s["start"], s["tokens"]) for s in answer["segments"]] == want


@pytest.mark.parametrize(
    ("audio", "fields", "param", "words"),
    [
        (b"", {}, "file", "empty"),
        (b"RIFF" + b"\x00" * 64, {}, "file", "not audio"),
        (b"not audio at all" * 50, {}, "file", "not audio"),
        (None, {}, "file", "'file' is required"),
        (wav_bytes(0.5), {"temperature": "2"}, "temperature", "<= 1"),
        (wav_bytes(0.5), {"temperature": "hot"}, "temperature", "Expected `float`"),
        (wav_bytes(0.5), {"response_format": "mp3"}, "response_format", "Invalid enum value"),
        (wav_bytes(0.5), {"language": "xx"}, "language", "Unknown language"),
        (wav_bytes(0.5), {"speaker": "a"}, None, "unknown field"),
        (wav_bytes(0.5), {"stream": "true"}, "stream", "Streaming"),
        (wav_bytes(0.5), {"prompt": "the " * 200}, "prompt", "at most"),
    ],
)
async def test_bad_input_is_a_400_naming_its_field(
    client: Client, audio: bytes | None, fields: dict[str, str], param: str | None, words: str
) -> None:
    http, _ = client
    response = await post(http, audio, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"], error
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


async def test_a_too_long_file_is_refused_and_a_clip_in_flight_is_not_disturbed(client: Client, reference: Any) -> None:
    http, state = client
    generate, text = reference
    state.limits = replace(state.limits, audio=AudioLimits(max_seconds=2.0))
    good = wav_bytes(1.0, seed=9)
    answers = await asyncio.gather(
        post(http, good), post(http, wav_bytes(3.0)), post(http, b"\x00garbage" * 100), post(http, good)
    )
    assert answers[1].status_code == 400 and "at most 2 s" in answers[1].json()["error"]["message"]
    assert answers[2].status_code == 400
    want = text(generate(good)[0])
    assert answers[0].json()["text"] == answers[3].json()["text"] == want


async def test_other_models_and_bodies_answer_in_openai_words(client: Client) -> None:
    http, _ = client
    listed = {m["name"]: m for m in (await http.get("/v1/models")).json()["models"]}
    assert (listed[WHISPER]["tasks"], listed[WHISPER]["inputs"], listed[WHISPER]["outputs"]) == (
        ["transcribe"],
        ["audio"],
        ["text"],
    )
    embedder = await http.post(ROUTE, data={"model": TINY_EMBEDDER}, files={"file": ("a.wav", wav_bytes(0.2))})
    assert_openai(embedder, 400, "invalid_request")
    assert embedder.json()["error"]["param"] == "model"
    missing = await http.post(ROUTE, data={"model": "no/such"}, files={"file": ("a.wav", wav_bytes(0.2))})
    assert missing.status_code == 404, missing.text
    as_json = await http.post(ROUTE, json={"model": WHISPER})
    assert_openai(as_json, 400, "invalid_request")
    assert "multipart/form-data" in as_json.json()["error"]["message"]


async def test_a_file_over_the_byte_limit_is_a_400_and_a_body_over_the_limit_a_413(client: Client) -> None:
    from sift_server.core.transcriptions import MAX_AUDIO_BYTES

    http, state = client
    over_file = b"\x00" * (MAX_AUDIO_BYTES + 1)  # under the body limit: refused by the form's own bound
    assert state.settings.max_body_bytes > MAX_AUDIO_BYTES + 1
    response = await post(http, over_file)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "file" and f"over {MAX_AUDIO_BYTES} bytes" in error["message"]
    assert error["type"] == "invalid_request_error"
    over_body = b"\x00" * (state.settings.max_body_bytes + 1)  # refused from its Content-Length
    response = await post(http, over_body)
    assert response.status_code == 413, response.text
    assert "exceeds the limit" in response.json()["error"]["message"]
