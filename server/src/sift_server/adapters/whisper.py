"""Whisper transcription on transformers' own ``WhisperForConditionalGeneration.generate``
(the model's reference implementation, and the reference server's engine too), and on
CTranslate2's ``Whisper`` at float32 where it answers the same tokens, faster.

Which engine (docs/speech.md measures both on this CPU): the entry's ``options.engine``,
``auto`` by default: CTranslate2 when it is installed (the ``ctranslate2`` extra; the
checkpoint is converted once into the artifact cache) for greedy clips of up to 30 s
without timestamps (``json``, ``text``), ``generate`` for the rest: long-form audio,
timestamps (``verbose_json``, ``srt``, ``vtt``) and sampling, where CTranslate2 would
decode differently. A clip whose CTranslate2 answer reached its length cap (it decodes
at most half the model's positions, ``generate`` up to all of them) is decoded again
by ``generate``, so every answer is ``generate``'s. ``generate``: always ``generate``;
``ctranslate2``: as ``auto``, refused at load when CTranslate2 is missing. Sift writes
no decoding loop: each engine does its own decoding, timestamp rules and long form.

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

from sift_server.adapters._ctranslate2 import MODEL_FILE, converted
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput, TranscribeTask
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch

# Whisper's encoder reads 30 s windows of 1,500 positions: a clip's cost in the batcher.
WINDOW_POSITIONS = 1_500
ENGINES = ("auto", "generate", "ctranslate2")

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
    def __init__(self, model: Any, processor: Any, device: torch.device, ct2: Any = None, ct2_bytes: int = 0) -> None:
        self._model = model
        self._processor = processor
        self._device = device
        self._ct2 = ct2  # CTranslate2's Whisper, or None: generate answers everything
        self._ct2_bytes = ct2_bytes  # its float32 weights, held beside generate's model
        # Clips answered by each engine (the tests read it to see which one ran).
        self.answered = {"ctranslate2": 0, "generate": 0}
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
            runtime={
                "backend": "torch",
                "precision": "fp32",
                "engine": "transformers generate"
                if ct2 is None
                else "ctranslate2 (clips up to 30 s, greedy, no timestamps); transformers generate (the rest)",
            },
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
        ct2, ct2_bytes = _ctranslate2_whisper(ctx, device)
        return cls(model, processor, device, ct2, ct2_bytes)

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
        clips: list[_Clip] = [part.prepared.payload for part in parts]
        answers: list[Transcript | None] = [None] * len(clips)
        if self._ct2_answers(clips[0]):
            answers = self._ctranslate2(clips)
        again = [i for i, answer in enumerate(answers) if answer is None]
        if again:
            for i, answer in zip(again, self._generate([clips[i] for i in again]), strict=True):
                answers[i] = answer
        self.answered["generate"] += len(again)
        self.answered["ctranslate2"] += len(clips) - len(again)
        return [[answer] for answer in answers]

    def _ct2_answers(self, head: _Clip) -> bool:
        """Whether CTranslate2 decodes a batch like ``head`` as ``generate`` does."""
        if self._ct2 is None or head.attention_mask is not None or head.timestamps or head.temperature > 0:
            return False
        # Without a language, a multilingual model detects it: CTranslate2 can where its
        # vocabulary is a multilingual Whisper's (every released multilingual checkpoint).
        return head.language is not None or not self._multilingual or bool(self._ct2.is_multilingual)

    def _start(self, clip: _Clip, language: str | None) -> list[int]:
        """The decoder's prompt, as ``generate`` builds it: the previous text, then the task."""
        tokenizer = self._processor.tokenizer
        ids = [int(t) for t in self._processor.get_prompt_ids(clip.prompt)] if clip.prompt else []
        names = ["<|startoftranscript|>"]
        if self._multilingual:
            names += [f"<|{language}|>", "<|transcribe|>"]
        names.append("<|notimestamps|>")
        return ids + [int(tokenizer.convert_tokens_to_ids(name)) for name in names]

    def _ctranslate2(self, clips: Sequence[_Clip]) -> list[Transcript | None]:
        """CTranslate2's greedy answers; None for a clip that reached its length cap."""
        import ctranslate2

        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(np.stack([c.features for c in clips])))
        head = clips[0]
        languages: list[str | None] = [head.language] * len(clips)
        if head.language is None and self._multilingual:
            languages = [str(found[0][0])[2:-2] for found in self._ct2.detect_language(features)]
        starts = [self._start(clip, language) for clip, language in zip(clips, languages, strict=True)]
        positions = int(self._model.config.max_target_positions)
        results = self._ct2.generate(features, starts, beam_size=1, max_length=positions)
        tokenizer = self._processor.tokenizer
        answers: list[Transcript | None] = []
        for clip, start, result in zip(clips, starts, results, strict=True):
            row = [int(t) for t in result.sequences_ids[0]]
            # CTranslate2 decodes at most half the positions; generate, up to all of them.
            if len(row) >= min(positions // 2, positions - len(start)):
                answers.append(None)
                continue
            language = self.language_name(head.language)
            answers.append(Transcript(_text(tokenizer, row), _text_tokens(tokenizer, row), (), language, clip.duration))
        return answers

    def _generate(self, clips: Sequence[_Clip]) -> list[Transcript]:
        import torch

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
        return self._transcripts(out, clips, self.language_name(language))

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
        return module_bytes(self._model) + self._ct2_bytes

    def close(self) -> None:
        release_module(self._model, self._device)
        if self._ct2 is not None:
            self._ct2.unload_model()
            self._ct2 = None


def _ctranslate2_whisper(ctx: LoadContext, device: torch.device) -> tuple[Any, int]:
    """CTranslate2's Whisper over the checkpoint's float32 conversion and its weights'
    bytes, or (None, 0) where ``generate`` answers everything (``options.engine``; see
    the module's docstring)."""
    engine = str(ctx.options.get("engine", "auto"))
    if engine not in ENGINES:
        raise UnservableModel(f"options.engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "generate" or device.type != "cpu":
        return None, 0
    try:
        import ctranslate2
    except ImportError as exc:
        if engine == "ctranslate2":
            raise UnservableModel("options.engine ctranslate2 needs the ctranslate2 extra") from exc
        return None, 0
    artifact = converted(ctx.path, ctx.cache_dir, "whisper", threads=ctx.torch_threads)
    model = ctranslate2.models.Whisper(
        str(artifact), device="cpu", compute_type="float32", inter_threads=1, intra_threads=max(0, ctx.torch_threads)
    )
    return model, (artifact / MODEL_FILE).stat().st_size


def _text(tokenizer: Any, tokens: Sequence[int]) -> str:
    return str(tokenizer.decode(list(tokens), skip_special_tokens=True)).strip()


def _text_tokens(tokenizer: Any, tokens: Sequence[int]) -> tuple[int, ...]:
    """The tokens without the special ones (prompt, language, task, timestamps, end)."""
    special = set(tokenizer.all_special_ids)
    first_timestamp = tokenizer.convert_tokens_to_ids("<|0.00|>")
    return tuple(t for t in tokens if t not in special and t < first_timestamp)
