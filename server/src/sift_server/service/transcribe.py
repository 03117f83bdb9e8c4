"""The transcribe use case: a checked form in, the model's transcript out.

The file is decoded (service/audio.py) and its features computed in the prep thread
(a deferred decode, as images are), so a corrupt or too long file fails there, before
the request reaches the model's engine, and nothing else in its batch is touched.
Clips that can share a ``generate`` are batched by the model engine like any request."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sift_server.adapters.base import TaskInput, TranscribeTask
from sift_server.core.transcriptions import TranscriptionBody, wants_segments
from sift_server.errors import InvalidInput
from sift_server.registry.registry import Registry
from sift_server.service.audio import decode_audio
from sift_server.service.common import Limits, ready_for
from sift_server.service.run import RequestContext, run_task
from sift_server.service.timing import Timing


@dataclass(frozen=True, slots=True)
class TranscriptionOutcome:
    text: str
    # Dicts of id, seek, start, end, text, tokens, temperature (OpenAI's verbose_json segments).
    segments: list[dict[str, Any]]
    language: str | None
    duration: float
    timing: Timing


async def transcribe(
    registry: Registry, body: TranscriptionBody, limits: Limits, ctx: RequestContext
) -> TranscriptionOutcome:
    target = ready_for(registry, body.model, "transcribe")
    adapter = target.record.adapter
    assert adapter is not None
    rate = int(getattr(adapter, "sampling_rate", 16_000))
    task = TranscribeTask(
        audio=body.file,
        language=body.language,
        prompt=body.prompt,
        temperature=body.temperature,
        timestamps=wants_segments(body.response_format),
        sampling_rate=rate,
    )

    def complete(pending: TaskInput) -> TaskInput:
        if not isinstance(pending, TranscribeTask):
            raise InvalidInput("Not an audio request.")
        return replace(pending, samples=decode_audio(pending.audio, pending.sampling_rate, limits.audio), audio=b"")

    timing = Timing(started=ctx.started)
    outputs, _ = await run_task(target.record, target.engine, task, ctx, timing, None, complete)
    transcript = outputs[0]
    segments = [
        {
            "id": index,
            "seek": 0,
            "start": segment.start,
            "end": segment.end,
            "text": segment.text,
            "tokens": list(segment.tokens),
            "temperature": body.temperature,
        }
        for index, segment in enumerate(transcript.segments)
    ]
    if task.timestamps and not segments:
        # The model wrote no timestamp pair: the whole clip is one segment.
        segments = [
            {
                "id": 0,
                "seek": 0,
                "start": 0.0,
                "end": round(transcript.duration, 2),
                "text": transcript.text,
                "tokens": list(transcript.tokens),
                "temperature": body.temperature,
            }
        ]
    return TranscriptionOutcome(transcript.text, segments, transcript.language, transcript.duration, timing)
