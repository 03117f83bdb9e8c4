"""Whisper transcription on transformers' own ``WhisperForConditionalGeneration.generate``
(the model's reference implementation, and the reference server's engine too).

Why this engine: docs/speech.md compares it with CTranslate2 (faster-whisper) on this
CPU. Sift writes no decoding loop: ``generate`` does the greedy (or sampled, with a
temperature) decoding, the timestamp rules and long-form transcription past 30 s.

``prepare`` (in the prep thread, after the service decoded the audio) computes the
log-mel features; clips of up to 30 s that ask for the same language, prompt,
temperature and timestamps share a forward (one ``generate`` over the batch, each
clip padded to Whisper's 30 s window as the model expects); a longer clip runs alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput, TranscribeTask
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch

# Whisper's encoder reads 30 s windows of 1,500 positions: a clip's cost in the batcher.
WINDOW_POSITIONS = 1_500

_long_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class Segment:
    start: float
    end: float
    text: str
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Transcript:
    """One clip's answer: its text, its segments (timestamped answers only) and language."""

    text: str
    tokens: tuple[int, ...]
    segments: tuple[Segment, ...]
    language: str | None
    duration: float


@dataclass(frozen=True, slots=True)
class _Clip:
    features: np.ndarray  # (mels, frames)
    attention_mask: np.ndarray | None  # long-form only
    duration: float
    language: str | None
    prompt: str | None
    temperature: float
    timestamps: bool


class WhisperAdapter(Adapter):
    def __init__(self, model: Any, processor: Any, device: torch.device) -> None:
        self._model = model
        self._processor = processor
        self._device = device
        generation = model.generation_config
        self._lang_to_id: dict[str, int] = dict(getattr(generation, "lang_to_id", None) or {})
        self._multilingual = bool(getattr(generation, "is_multilingual", False)) and bool(self._lang_to_id)
        self._window_samples = int(processor.feature_extractor.n_samples)
        self._sampling_rate = int(processor.feature_extractor.sampling_rate)
        # Whisper's prompt (``<|startofprev|>`` and its tokens) may take at most half the context.
        self._max_prompt_tokens = int(model.config.max_target_positions) // 2 - 1
        self.info = AdapterInfo(
            tasks=frozenset({"transcribe"}),
            inputs=("audio",),
            max_sequence_length=int(model.config.max_target_positions),
            runtime={"backend": "torch", "precision": "fp32", "engine": "transformers generate"},
        )

    @property
    def sampling_rate(self) -> int:
        return self._sampling_rate

    @classmethod
    def load(cls, ctx: LoadContext) -> WhisperAdapter:
        import torch
        from transformers import AutoConfig, WhisperForConditionalGeneration, WhisperProcessor

        if ctx.precision not in (None, "fp32"):
            raise UnservableModel(f"the whisper adapter runs at fp32 only, not {ctx.precision}")
        config = AutoConfig.from_pretrained(ctx.path)
        if config.model_type != "whisper":
            raise UnservableModel(f"{ctx.path} holds a {config.model_type} model, not a Whisper model")
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model = WhisperForConditionalGeneration.from_pretrained(ctx.path, dtype=torch.float32).to(device).eval()
        processor = WhisperProcessor.from_pretrained(ctx.path)
        return cls(model, processor, device)

    def language_token(self, language: str) -> str:
        """Whisper's token for a language code or name ("en", "english"); InvalidInput if unknown."""
        from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

        if not self._multilingual:
            raise InvalidInput("This model is English-only: it takes no 'language'.", param="language")
        key = language.strip().lower()
        code = TO_LANGUAGE_CODE.get(key, key)
        code = str(code)
        if f"<|{code}|>" not in self._lang_to_id:
            raise InvalidInput(f"Unknown language '{language}' for this model.", param="language")
        return code

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, TranscribeTask):
            raise InvalidInput("The whisper adapter only transcribes audio.")
        if task.samples is None:
            raise InvalidInput("The audio was not decoded.", param="file")
        language = self.language_token(task.language) if task.language else None
        if task.prompt:
            prompt_tokens = len(
                self._processor.tokenizer(" " + task.prompt.strip(), add_special_tokens=False).input_ids
            )
            if prompt_tokens > self._max_prompt_tokens:
                raise InvalidInput(
                    f"The prompt is {prompt_tokens} tokens; this model reads at most {self._max_prompt_tokens}.",
                    param="prompt",
                )
        samples = np.asarray(task.samples, dtype=np.float32)
        long_form = samples.shape[0] > self._window_samples
        extractor = self._processor.feature_extractor
        if long_form:
            out = extractor(
                samples,
                sampling_rate=self._sampling_rate,
                return_tensors="np",
                truncation=False,
                padding="longest",
                return_attention_mask=True,
            )
            mask = out["attention_mask"][0]
        else:
            out = extractor(samples, sampling_rate=self._sampling_rate, return_tensors="np")
            mask = None
        features = out["input_features"][0]
        clip = _Clip(
            features=features,
            attention_mask=mask,
            duration=samples.shape[0] / self._sampling_rate,
            language=language,
            prompt=task.prompt or None,
            temperature=task.temperature,
            timestamps=task.timestamps or long_form,
        )
        windows = max(1, -(-features.shape[-1] // 3000))
        # Clips that may share one ``generate``; a long-form clip runs alone.
        key: tuple[Any, ...] = ("short", language, clip.prompt, clip.temperature, clip.timestamps)
        if long_form:
            key = ("long", next(_long_ids))
        return Prepared(item_costs=[WINDOW_POSITIONS * windows], compat_key=key, payload=clip)

    def generate_kwargs(self, clip: _Clip) -> dict[str, Any]:
        """What ``generate`` is called with for a clip (the parity test calls it the same way)."""
        import torch

        kwargs: dict[str, Any] = {"return_timestamps": clip.timestamps}
        if self._multilingual:
            kwargs["task"] = "transcribe"
        if clip.language is not None:
            kwargs["language"] = clip.language
        if clip.prompt:
            ids = self._processor.get_prompt_ids(clip.prompt, return_tensors="pt")
            kwargs["prompt_ids"] = torch.as_tensor(ids).to(self._device)
        if clip.temperature > 0:
            kwargs.update(do_sample=True, temperature=clip.temperature)
        else:
            kwargs["do_sample"] = False
        if clip.timestamps:
            kwargs["return_segments"] = True
        return kwargs

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        clips: list[_Clip] = [part.prepared.payload for part in parts]
        head = clips[0]
        features = torch.from_numpy(np.stack([c.features for c in clips])).to(self._device)
        kwargs = self.generate_kwargs(head)
        if head.attention_mask is not None:
            masks = [c.attention_mask for c in clips if c.attention_mask is not None]
            kwargs["attention_mask"] = torch.from_numpy(np.stack(masks)).to(self._device)
        language = head.language
        if language is None and head.timestamps and self._multilingual:
            language = self._detect_language(features)
        with torch.inference_mode():
            out = self._model.generate(features, **kwargs)
        return [[t] for t in self._transcripts(out, clips, self.language_name(language))]

    def _detect_language(self, features: torch.Tensor) -> str | None:
        import torch

        with torch.inference_mode():
            ids = self._model.detect_language(features[:1])
        token = self._processor.tokenizer.convert_ids_to_tokens(int(ids.reshape(-1)[0]))
        return str(token)[2:-2] if isinstance(token, str) and token.startswith("<|") else None

    @staticmethod
    def language_name(code: str | None) -> str | None:
        """OpenAI names a language in words ("english"), from Whisper's own table."""
        from transformers.models.whisper.tokenization_whisper import LANGUAGES

        return None if code is None else str(LANGUAGES.get(code, code))

    def _transcripts(self, out: Any, clips: Sequence[_Clip], language: str | None) -> list[Transcript]:
        tokenizer = self._processor.tokenizer
        if not isinstance(out, dict):
            rows = [[int(t) for t in row] for row in out]
            return [
                Transcript(_text(tokenizer, row), _text_tokens(tokenizer, row), (), language, clip.duration)
                for row, clip in zip(rows, clips, strict=True)
            ]
        transcripts = []
        for index, clip in enumerate(clips):
            segments = []
            for seg in out["segments"][index]:
                tokens = [int(t) for t in seg["tokens"]]
                start, end = float(seg["start"]), float(seg["end"])
                segments.append(
                    Segment(round(start, 2), round(min(end, clip.duration), 2), _text(tokenizer, tokens), tuple(tokens))
                )
            row = [int(t) for t in out["sequences"][index]]
            transcripts.append(
                Transcript(
                    _text(tokenizer, row), _text_tokens(tokenizer, row), tuple(segments), language, clip.duration
                )
            )
        return transcripts

    def memory_bytes(self) -> int:
        return module_bytes(self._model)

    def close(self) -> None:
        release_module(self._model, self._device)


def _text(tokenizer: Any, tokens: Sequence[int]) -> str:
    return str(tokenizer.decode(list(tokens), skip_special_tokens=True)).strip()


def _text_tokens(tokenizer: Any, tokens: Sequence[int]) -> tuple[int, ...]:
    """The tokens without the special ones (prompt, language, task, timestamps, end)."""
    special = set(tokenizer.all_special_ids)
    first_timestamp = tokenizer.convert_tokens_to_ids("<|0.00|>")
    return tuple(t for t in tokens if t not in special and t < first_timestamp)
