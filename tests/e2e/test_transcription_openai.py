"""The OpenAI python client's ``audio.transcriptions.create`` against a real ``sift serve``
with the tiny random Whisper (tests/fixtures/tiny_whisper.py): every ``response_format``
it reads, and a bad file raised as the client's own ``BadRequestError``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.test_transcription_route import wav_bytes
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_whisper import build_tiny_whisper

WHISPER = "tiny/whisper"


@pytest.fixture(scope="module")
def speech_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("speech-server")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "embedder"))
    (catalog / "whisper.yaml").write_text(
        f"name: {WHISPER}\nadapter: whisper\nsource:\n  path: {build_tiny_whisper(root / 'whisper')}\n"
        "tasks: [transcribe]\nbackend: torch\n"
    )
    proc = start_server(
        ["--catalog", str(catalog), "--model", TINY_EMBEDDER, "--preload", WHISPER], root / "server.log"
    )
    yield proc
    proc.stop()


def test_the_openai_client_transcribes_in_every_format(speech_server: ServerProcess, tmp_path: Path) -> None:
    import openai

    client = openai.OpenAI(base_url=speech_server.url + "/v1", api_key="x")
    clip = tmp_path / "clip.wav"
    clip.write_bytes(wav_bytes(2.0, seed=1))
    with clip.open("rb") as audio:
        plain = client.audio.transcriptions.create(model=WHISPER, file=audio)
    assert plain.text
    with clip.open("rb") as audio:
        text = client.audio.transcriptions.create(model=WHISPER, file=audio, response_format="text")
    assert isinstance(text, str) and text.strip() == plain.text
    with clip.open("rb") as audio:
        verbose = client.audio.transcriptions.create(
            model=WHISPER,
            file=audio,
            response_format="verbose_json",
            language="en",
            timestamp_granularities=["segment"],
        )
    assert verbose.language == "english" and verbose.duration == 2.0
    assert verbose.segments and verbose.segments[0].start >= 0.0
    for fmt, head in (("srt", "1\n00:00:"), ("vtt", "WEBVTT\n\n00:00:")):
        with clip.open("rb") as audio:
            subtitles = client.audio.transcriptions.create(model=WHISPER, file=audio, response_format=fmt)
        assert isinstance(subtitles, str) and subtitles.startswith(head), subtitles


def test_a_corrupt_file_is_the_clients_bad_request(speech_server: ServerProcess) -> None:
    import openai

    client = openai.OpenAI(base_url=speech_server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(model=WHISPER, file=("clip.wav", b"RIFF not a wave file"))
    assert caught.value.status_code == 400
    assert "file" in str(caught.value)
