"""Which engine decodes Whisper fastest on this CPU, and does it match transformers'
greedy ``generate`` at fp32? (docs/speech.md has the figures.)

A random model of whisper-tiny's shape (d_model 384, 4 + 4 layers, 6 heads, a
51,865-token vocabulary; tests/fixtures/tiny_whisper.py) built offline: no weights are
downloaded. Its special tokens' rows are zero, so every answer runs to ``TOKENS`` text
tokens, about what 30 s of speech makes; each arm decodes the same 30 s log-mel
features, one clip at a time and 8 in one batch (8 concurrent requests as the model
engine batches them). Arms: transformers' ``generate`` (fp32, the reference), and
CTranslate2's Whisper (the engine of faster-whisper) at float32 and int8.
OpenVINO GenAI's WhisperPipeline needs the model exported by optimum-intel first; it is
not measured here (docs/speech.md says why).

    PYTHONPATH=/path/with/ctranslate2 taskset -c 1 .venv/bin/python probes/speech_engines.py

Figures are audio seconds decoded per wall second (real-time factor's inverse), best of
``REPEATS``; the machine is shared, so compare arms of one run, not runs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKENS = 96
REPEATS = 3
CLIP_S = 30.0


def _best(fn: Any) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    import numpy as np
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from tests.fixtures.tiny_whisper import build_whisper

    folder = Path(tempfile.mkdtemp()) / "whisper-tiny-shape"
    build_whisper(folder, seed=7, d_model=384, layers=4, heads=6, filler_tokens=51865 - 1780, max_target_positions=448)
    processor = WhisperProcessor.from_pretrained(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder).eval()
    rng = np.random.default_rng(0)
    clip = (0.1 * rng.standard_normal(int(CLIP_S * 16000))).astype(np.float32)
    features = processor(clip, sampling_rate=16000, return_tensors="pt").input_features
    prompt = [model.generation_config.decoder_start_token_id, model.generation_config.lang_to_id["<|en|>"]]
    prompt += [model.generation_config.task_to_id["transcribe"], model.generation_config.no_timestamps_token_id]
    torch.set_num_threads(torch.get_num_threads())

    def hf(batch: int) -> list[list[int]]:
        with torch.inference_mode():
            out = model.generate(
                features.repeat(batch, 1, 1), language="en", max_new_tokens=TOKENS, min_new_tokens=TOKENS
            )
        # generate answers the new tokens only (the prompt is not repeated), as CTranslate2 does.
        return [row.tolist() for row in out]

    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    ct2_dir = folder.parent / "ct2"
    TransformersConverter(str(folder)).convert(str(ct2_dir), quantization="float32", force=True)
    arms: dict[str, Any] = {"transformers generate fp32": hf}
    # CTranslate2's Whisper writes at most half of ``max_length`` new tokens (as openai-whisper's
    # sample_len, n_text_ctx // 2): 2 * TOKENS gives the same TOKENS as generate's.
    for compute in ("float32", "int8"):
        ct2 = ctranslate2.models.Whisper(
            str(ct2_dir), device="cpu", compute_type=compute, intra_threads=torch.get_num_threads()
        )

        def run(batch: int, ct2: Any = ct2) -> list[list[int]]:
            view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features.repeat(batch, 1, 1).numpy()))
            results = ct2.generate(
                view,
                [prompt] * batch,
                beam_size=1,
                max_length=2 * TOKENS,
                suppress_blank=True,
                suppress_tokens=[],
            )
            return [r.sequences_ids[0][:TOKENS] for r in results]

        arms[f"CTranslate2 {compute}"] = run

    reference = hf(1)[0]
    print(f"threads {torch.get_num_threads()}; {len(reference)} tokens per clip of {CLIP_S:.0f} s")
    for name, arm in arms.items():
        tokens = arm(1)[0]
        same = sum(a == b for a, b in zip(tokens, reference, strict=False))
        for batch in (1, 8):
            wall = _best(lambda arm=arm, batch=batch: arm(batch))
            print(f"{name:28s} batch {batch}: {batch * CLIP_S / wall:7.1f} audio s/s ({wall:.3f} s)", flush=True)
        print(f"{name:28s} tokens equal to generate's: {same}/{len(reference)} (len {len(tokens)})")


if __name__ == "__main__":
    main()
