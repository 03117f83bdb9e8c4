"""The transformers -> CTranslate2 conversion (adapters/_ctranslate2.py) runs in a child
process at nice 19, not in the loading process; what it writes is moved
into the artifact cache only when it succeeded: a conversion that fails is reported
with its reason, one that is killed is reported as such, and neither leaves a half
artifact (nor its temporary folder) in the cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sift_server.adapters import _ctranslate2, load_peak
from sift_server.adapters._ctranslate2 import ConversionFailed, conversion_peak_bytes, converted
from tests.fixtures.tiny_translator import build_tiny_translator

pytest.importorskip("ctranslate2")

PROBE = "tests.translation.convert_probe_child"


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_translator(tmp_path_factory.mktemp("convert") / "hf")


def leftovers(cache: Path) -> list[str]:
    """Everything under the cache's ctranslate2 folder (artifacts and temporary folders)."""
    folder = cache / "ctranslate2"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_tiny_t5_is_converted_in_a_child_at_nice_19(
    hf_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.json"
    monkeypatch.setattr(_ctranslate2, "CHILD_MODULE", PROBE)
    monkeypatch.setenv("CT2_PROBE_RECORD", str(record))
    peaks: list[int] = []
    with load_peak.listening(peaks.append):
        artifact = converted(hf_folder, tmp_path / "cache", "seq2seq", threads=1)
    assert peaks == [conversion_peak_bytes(hf_folder)]  # told to the registry before the child starts
    assert (artifact / "model.bin").is_file() and artifact.parent == tmp_path / "cache" / "ctranslate2"
    child = json.loads(record.read_text())
    assert child["pid"] != os.getpid()
    assert child["nice"] == 19
    # Served as converted: the translator opens it and translates.
    import ctranslate2

    translator = ctranslate2.Translator(str(artifact), device="cpu", compute_type="float32")
    out = translator.translate_batch([["▁the", "▁cat", "</s>"]], max_decoding_length=3, beam_size=1)
    assert len(out[0].hypotheses[0]) > 0
    # Converted once: the next load uses the cached artifact, no child started.
    record.unlink()
    with load_peak.listening(peaks.append):
        assert converted(hf_folder, tmp_path / "cache", "seq2seq") == artifact
    assert not record.exists() and len(peaks) == 1


def test_the_conversion_peak_is_the_model_as_loaded_and_its_float32_copy(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    (folder / "config.json").write_text(json.dumps({"model_type": "t5", "dtype": "bfloat16"}))
    assert conversion_peak_bytes(folder) == 1000 + 2000
    (folder / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert conversion_peak_bytes(folder) == 1000 + 1000


def test_a_conversion_that_fails_is_reported_with_its_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(
        json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]})
    )
    cache = tmp_path / "cache"
    with pytest.raises(ConversionFailed) as raised:
        converted(broken, cache, "seq2seq")
    message = str(raised.value)
    assert "converting" in message and str(broken) in message
    assert "Error" in message  # the converter's own exception, named
    assert leftovers(cache) == []


def test_a_killed_conversion_leaves_no_half_artifact(
    hf_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ctranslate2, "CHILD_MODULE", PROBE)
    monkeypatch.setenv("CT2_PROBE_DIE", "1")
    cache = tmp_path / "cache"
    with pytest.raises(ConversionFailed, match=r"died \(exit code -9\)"):
        converted(hf_folder, cache, "seq2seq")
    assert leftovers(cache) == []
