"""``POST /v1/audio/transcriptions`` through the cluster (nats-server, a gateway, one
worker serving the tiny random Whisper): a clip's answer equals transformers' own greedy
``generate`` at fp32, and every bad input is answered in the OpenAI envelope before any
work, as ``sift serve`` answers it (tests/api/test_transcription_route.py): the form's
faults (an empty file, a file over the byte limit, an unknown ``response_format`` or
field) by the gateway, before the queue; the audio's (a corrupt file, a clip over the
duration limit) by the worker before its model's engine, relayed unchanged; a clip in
flight alongside them is not disturbed."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import nats
import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from sift_server.cluster.subjects import STREAM, durable_name
from sift_server.core.transcriptions import MAX_AUDIO_BYTES
from sift_server.service.audio import MAX_AUDIO_SECONDS
from tests.api.test_transcription_route import wav_bytes
from tests.cluster.conftest import add_worker, start_cluster, wait_for, wait_workers
from tests.fixtures.tiny_whisper import build_tiny_whisper

pytest.importorskip("av")

WHISPER = "tiny/whisper"
WORKER = "w-speech"
ROUTE = "/v1/audio/transcriptions"


class Built:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.whisper = build_tiny_whisper(root / "whisper")
        self.catalog = root / "catalog"
        self.catalog.mkdir()
        (self.catalog / "whisper.yaml").write_text(
            f"name: {WHISPER}\nadapter: whisper\nsource:\n  path: {self.whisper}\ntasks: [transcribe]\nbackend: torch\n"
        )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("speech-cluster"))


@pytest.fixture(scope="module")
def cluster(built: Built) -> Iterator[LocalCluster]:
    running = start_cluster(built.root / "cluster", 0, [], ["--catalog", str(built.catalog)])
    try:
        args = ["--catalog", str(built.catalog), "--model", WHISPER, "--preload", WHISPER, "--torch-threads", "1"]
        add_worker(running, WORKER, [*args, "--cache-dir", str(built.root / "artifacts")])
        # Until its first start has converted the model (a child at nice 19: minutes on a busy machine),
        # watched on disk: polling the heartbeats that long runs out of NATS consumers.
        if importlib.util.find_spec("ctranslate2") is not None:  # engine auto converts where it can
            wait_for(lambda: any((built.root / "artifacts").glob("ctranslate2/*/model.bin")), "the conversion", 900)
        wait_workers(running, WHISPER, {WORKER})
        yield running
    finally:
        running.stop()


def greedy_text(folder: Path, audio: bytes) -> str:
    """transformers' own greedy ``generate`` at fp32 on a clip of up to 30 s."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    processor = WhisperProcessor.from_pretrained(folder)
    with wave.open(io.BytesIO(audio)) as clip:
        samples = np.frombuffer(clip.readframes(clip.getnframes()), "<i2").astype(np.float32) / 32768.0
    features = processor(samples, sampling_rate=16_000, return_tensors="pt").input_features
    with torch.inference_mode():
        tokens = model.generate(features, task="transcribe", do_sample=False)[0]
    return str(processor.tokenizer.decode(list(tokens), skip_special_tokens=True)).strip()


def delivered(nats_url: str) -> int:
    """How many requests the model's queue has handed to a worker so far."""

    async def read() -> int:
        nc = await nats.connect(nats_url)
        try:
            info = await nc.jetstream().consumer_info(STREAM, durable_name(WHISPER))
            return int(info.delivered.consumer_seq or 0)
        finally:
            await nc.close()

    return asyncio.run(read())


def post(url: str, audio: bytes | None, **fields: str) -> httpx.Response:
    parts: list[tuple[str, Any]] = [(name, (None, value)) for name, value in {"model": WHISPER, **fields}.items()]
    if audio is not None:
        parts.append(("file", ("clip.wav", audio, "audio/wav")))
    return httpx.post(f"{url}{ROUTE}", files=parts, timeout=300)


def long_wav(seconds: float) -> bytes:
    """A silent 1 kHz 8-bit WAV whose header says ``seconds`` (small enough for one NATS message)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(1_000)
        out.writeframes(b"\x80" * int(seconds * 1_000))
    return buffer.getvalue()


GOOD = wav_bytes(1.0, seed=9)
# (audio, fields, param, words in the message, refused by the gateway before the queue)
BAD: list[tuple[bytes | None, dict[str, str], str | None, str, bool]] = [
    (b"", {}, "file", "empty", True),
    (b"\x00" * (MAX_AUDIO_BYTES + 1), {}, "file", f"over {MAX_AUDIO_BYTES} bytes", True),
    (GOOD, {"response_format": "mp3"}, "response_format", "Invalid enum value", True),
    (GOOD, {"speaker": "a"}, None, "unknown field", True),
    (None, {}, "file", "'file' is required", True),
    (b"not audio at all" * 50, {}, "file", "not audio", False),
    (b"RIFF" + b"\x00" * 64, {}, "file", "not audio", False),
    (long_wav(MAX_AUDIO_SECONDS + 1), {}, "file", f"at most {MAX_AUDIO_SECONDS:.0f} s", False),
]


def test_a_clip_through_the_gateway_equals_transformers_greedy(cluster: LocalCluster, built: Built) -> None:
    answer = post(cluster.url, GOOD)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == greedy_text(built.whisper, GOOD)
    text = post(cluster.url, GOOD, response_format="text")
    assert text.status_code == 200 and text.text.strip() == answer.json()["text"]


@pytest.mark.parametrize(("audio", "fields", "param", "words", "at_gateway"), BAD)
def test_bad_input_through_the_gateway_is_a_400_in_the_openai_envelope(
    cluster: LocalCluster, audio: bytes | None, fields: dict[str, str], param: str | None, words: str, at_gateway: bool
) -> None:
    before = delivered(cluster.nats_url)
    response = post(cluster.url, audio, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"], error
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_request"
    # The form's faults never reach the queue; the audio's are the worker's own answer.
    assert delivered(cluster.nats_url) == before + (0 if at_gateway else 1)


def test_bad_audio_does_not_disturb_a_clip_in_flight(cluster: LocalCluster, built: Built) -> None:
    bodies = [GOOD, b"\x00garbage" * 100, long_wav(MAX_AUDIO_SECONDS + 1), b"", GOOD]
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda audio: post(cluster.url, audio), bodies))
    assert [a.status_code for a in answers] == [200, 400, 400, 400, 200]
    want = greedy_text(built.whisper, GOOD)
    assert answers[0].json()["text"] == answers[-1].json()["text"] == want


def test_a_file_the_queue_cannot_carry_is_a_413_before_the_queue(cluster: LocalCluster) -> None:
    # Under the form's 24 MiB, over the local nats-server's max_payload (1 MB, its default): the
    # request cannot travel in one message, which no retry mends.
    audio = wav_bytes(70.0)
    assert 1_048_576 < len(audio) < MAX_AUDIO_BYTES
    before = delivered(cluster.nats_url)
    response = post(cluster.url, audio)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert "NATS max_payload" in error["message"] and error["type"] == "invalid_request_error"
    assert delivered(cluster.nats_url) == before
