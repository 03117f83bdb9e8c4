"""The whisper adapter's CTranslate2 engine: where ``auto`` runs it (greedy clips of up
to 30 s without timestamps) its answers equal transformers' ``generate`` (the same
adapter with ``options.engine: generate``) token for token at float32, batched as alone;
what it would answer differently (timestamps, sampling, an answer at its length cap)
goes to ``generate``; the checkpoint is converted once into the artifact cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.base import LoadContext, Part, TranscribeTask
from sift_server.adapters.whisper import WhisperAdapter
from tests.fixtures.tiny_whisper import build_tiny_whisper

pytest.importorskip("ctranslate2")

RATE = 16_000


def stopping_whisper(folder: Path) -> Path:
    """The tiny Whisper with a random ``<|endoftext|>`` embedding (tied to the output
    head) large enough that its answers end by themselves (12 tokens), under
    CTranslate2's length cap (half the 48 positions): the answers CTranslate2 gives."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    build_tiny_whisper(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    eos = WhisperProcessor.from_pretrained(folder).tokenizer.convert_tokens_to_ids("<|endoftext|>")
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        embedding = model.model.decoder.embed_tokens.weight
        scale = 12.0 * embedding[200:300].norm(dim=1).mean() / embedding.shape[1] ** 0.5
        embedding[eos] = torch.randn(embedding.shape[1], generator=generator) * scale
    model.save_pretrained(folder)
    return folder


def clip(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * (200 + 60 * seed) * t) + rng.normal(0, 0.05, t.shape)).astype(np.float32)


def load(folder: Path, cache: Path, engine: str) -> WhisperAdapter:
    ctx = LoadContext(
        path=folder, options={"engine": engine}, max_sequence_length=None, torch_threads=1, cache_dir=cache
    )
    return WhisperAdapter.load(ctx)


def transcribe(adapter: WhisperAdapter, tasks: list[TranscribeTask]) -> list[Any]:
    prepared = [adapter.prepare(task) for task in tasks]
    return [out[0] for out in adapter.forward([Part(p, 0, 1) for p in prepared])]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stopping_whisper(tmp_path_factory.mktemp("whisper") / "hf")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def both(folder: Path, cache: Path) -> tuple[WhisperAdapter, WhisperAdapter]:
    return load(folder, cache, "auto"), load(folder, cache, "generate")


def tasks(**fields: Any) -> list[TranscribeTask]:
    return [TranscribeTask(b"", samples=clip(s, i), **fields) for i, s in enumerate((1.0, 3.0, 7.5, 12.0))]


@pytest.mark.parametrize("fields", [{"language": "en"}, {"language": "de", "prompt": "the cat"}, {}])
def test_auto_answers_as_generate_does(both: tuple[WhisperAdapter, WhisperAdapter], fields: dict[str, Any]) -> None:
    fast, reference = both
    expected = [transcribe(reference, [task])[0] for task in tasks(**fields)]
    assert all(len(t.tokens) > 0 for t in expected)
    before = dict(fast.answered)
    alone = [transcribe(fast, [task])[0] for task in tasks(**fields)]
    batched = transcribe(fast, tasks(**fields))
    assert [(t.text, t.tokens, t.language) for t in alone] == [(t.text, t.tokens, t.language) for t in expected]
    assert [(t.text, t.tokens) for t in batched] == [(t.text, t.tokens) for t in expected]
    ran = fast.answered["ctranslate2"] - before["ctranslate2"]
    # This tiny vocabulary is not a multilingual Whisper's: CTranslate2 cannot detect a
    # language on it, so without one generate answers (a released checkpoint's can).
    assert ran == (8 if fields else 0)


def test_timestamps_and_sampling_go_to_generate(both: tuple[WhisperAdapter, WhisperAdapter]) -> None:
    fast, reference = both
    before = dict(fast.answered)
    stamped = tasks(language="en", timestamps=True)[:2]
    assert [t.segments for t in transcribe(fast, stamped)] == [t.segments for t in transcribe(reference, stamped)]
    transcribe(fast, tasks(language="en", temperature=0.8)[:1])
    assert fast.answered["ctranslate2"] == before["ctranslate2"]
    assert fast.answered["generate"] == before["generate"] + 3


def test_an_answer_at_ctranslate2s_cap_is_generates(tmp_path: Path) -> None:
    # The plain tiny Whisper never stops: its answers run past CTranslate2's cap (24 of 48).
    folder = build_tiny_whisper(tmp_path / "hf")
    cache = tmp_path / "artifacts"
    fast, reference = load(folder, cache, "ctranslate2"), load(folder, cache, "generate")
    task = tasks(language="en")[:1]
    answer = transcribe(fast, task)[0]
    assert len(answer.tokens) > 24
    assert answer.tokens == transcribe(reference, task)[0].tokens
    assert fast.answered == {"ctranslate2": 0, "generate": 1}


def test_converted_once_into_the_cache(both: tuple[WhisperAdapter, WhisperAdapter], cache: Path) -> None:
    fast, reference = both
    assert "ctranslate2" in fast.info.runtime["engine"]
    assert reference.info.runtime["engine"] == "transformers generate"
    converted = list(cache.glob("ctranslate2/*/model.bin"))
    assert len(converted) == 1  # both adapters of this folder share one conversion
    # Both engines' weights are held, and counted in the memory budget.
    assert fast.memory_bytes() == reference.memory_bytes() + converted[0].stat().st_size
    with pytest.raises(ValueError, match="engine"):
        load(Path(fast._processor.tokenizer.name_or_path), cache, "fastest")
