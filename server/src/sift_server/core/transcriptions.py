"""The OpenAI audio transcription body (``POST /v1/audio/transcriptions``, a
multipart form) and its answers in each ``response_format``.

The form is parsed by python-multipart through Starlette's parser (FastAPI's own),
bounded: one file, a few small text fields. Its fields are then converted to
:class:`TranscriptionBody` by msgspec, so a wrong type or value is a 400 naming
the field, in the OpenAI envelope, as the reference server answers them."""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Annotated, Any, Literal

import msgspec

from sift_server.errors import InvalidInput, UnsupportedField
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS
from sift_server.wire.split import Buffer

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
# The reference server's limits: a 24 MiB file, text fields of 8 KiB.
MAX_AUDIO_BYTES = 24 * 1024 * 1024
MAX_TEXT_FIELD_BYTES = 8 * 1024
_MAX_FIELDS = 16
_TIMESTAMP_FIELDS = ("timestamp_granularities[]", "timestamp_granularities")


class TranscriptionBody(msgspec.Struct, forbid_unknown_fields=True):
    """The form's fields (``file`` is the audio file's bytes). Unknown fields are refused,
    as the reference server does (OpenAI's other fields would be silently ignored)."""

    file: bytes
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MODEL_NAME_CHARS)]
    language: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    prompt: str | None = None
    response_format: ResponseFormat = "json"
    temperature: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    stream: bool = False
    timestamp_granularities: list[Literal["segment", "word"]] = msgspec.field(
        default_factory=list, name="timestamp_granularities[]"
    )


def _media(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


async def _one_chunk(raw: Buffer) -> AsyncGenerator[bytes]:
    yield bytes(raw)


async def parse_transcription(raw: Buffer, content_type: str | None) -> TranscriptionBody:
    """The form in ``raw``, checked; InvalidInput (400) for anything malformed."""
    from starlette.datastructures import Headers, UploadFile
    from starlette.formparsers import MultiPartException, MultiPartParser

    if _media(content_type) != "multipart/form-data":
        raise InvalidInput("This route accepts multipart/form-data only (a 'file' and a 'model').")
    parser = MultiPartParser(
        Headers({"content-type": content_type or ""}),
        _one_chunk(raw),
        max_files=1,
        max_fields=_MAX_FIELDS,
        max_part_size=MAX_TEXT_FIELD_BYTES,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(f"The request is not a valid multipart form: {exc.message}") from None
    except (KeyError, ValueError) as exc:
        raise InvalidInput(f"The request is not a valid multipart form: {exc}") from None
    fields: dict[str, Any] = {}
    granularities: list[str] = []
    try:
        for name, value in form.multi_items():
            if name in _TIMESTAMP_FIELDS:
                if not isinstance(value, str):
                    raise InvalidInput(f"Field '{name}' must be text.", param="timestamp_granularities")
                granularities.append(value)
                continue
            if name in fields:
                raise InvalidInput(f"Field '{name}' must appear once.", param=name)
            if name == "file":
                if not isinstance(value, UploadFile):
                    raise InvalidInput("Field 'file' must be a file upload.", param="file")
                data = await value.read(MAX_AUDIO_BYTES + 1)
                if len(data) > MAX_AUDIO_BYTES:
                    raise InvalidInput(f"The audio file is over {MAX_AUDIO_BYTES} bytes.", param="file")
                fields[name] = data
            elif isinstance(value, str):
                fields[name] = value
            else:
                raise InvalidInput(f"Field '{name}' must be text, not a file.", param=name)
    finally:
        await form.close()
    if granularities:
        fields["timestamp_granularities[]"] = granularities
    return _convert(fields)


def _convert(fields: Mapping[str, Any]) -> TranscriptionBody:
    for required in ("file", "model"):
        if required not in fields:
            raise InvalidInput(f"Field '{required}' is required.", param=required)
    try:
        # strict=False: form fields are text ("0.2" for a number, "false" for a boolean).
        body = msgspec.convert(fields, TranscriptionBody, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        raise InvalidInput(f"Invalid form field: {message}", param=_field_of(message)) from None
    if not body.file:
        raise InvalidInput("The audio file is empty.", param="file")
    if not body.model.strip():
        raise InvalidInput("Field 'model' must not be blank.", param="model")
    if body.stream:
        raise UnsupportedField("Streaming transcription is not supported.", param="stream")
    if "word" in body.timestamp_granularities:
        raise UnsupportedField("Word timestamps are not supported; ask for 'segment'.", param="timestamp_granularities")
    if body.timestamp_granularities and body.response_format != "verbose_json":
        raise InvalidInput(
            "timestamp_granularities requires response_format 'verbose_json'.", param="timestamp_granularities"
        )
    return body


def _field_of(message: str) -> str | None:
    """The field a msgspec error names (``... - at `$.temperature```), else None."""
    marker = "at `$."
    at = message.rfind(marker)
    if at < 0:
        return None
    name = message[at + len(marker) :].rstrip("`")
    name = name.split("[", 1)[0] if not name.startswith("timestamp_granularities") else "timestamp_granularities"
    return name or None


def wants_segments(response_format: ResponseFormat) -> bool:
    return response_format in ("verbose_json", "srt", "vtt")


# ---- answers --------------------------------------------------------------------------------

MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip",
    "vtt": "text/vtt; charset=utf-8",
}


def _clock(seconds: float, separator: str) -> str:
    total_ms = round(max(0.0, seconds) * 1000) if math.isfinite(seconds) else 0
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def subtitles(segments: Sequence[Mapping[str, Any]], *, vtt: bool) -> str:
    """SubRip or WebVTT cues, one per segment, as OpenAI writes them."""
    separator = "." if vtt else ","
    blocks = []
    for index, segment in enumerate(segments, start=1):
        start, end = _clock(segment["start"], separator), _clock(segment["end"], separator)
        prefix = "" if vtt else f"{index}\n"
        blocks.append(f"{prefix}{start} --> {end}\n{str(segment['text']).strip()}")
    content = "\n\n".join(blocks) + "\n"
    return f"WEBVTT\n\n{content}" if vtt else content


def transcription_answer(
    body: TranscriptionBody,
    text: str,
    segments: Sequence[Mapping[str, Any]],
    language: str | None,
    duration: float,
) -> tuple[bytes, str]:
    """The answer's bytes and media type for the asked ``response_format``.
    ``segments``: dicts of id, seek, start, end, text, tokens, temperature; ``language``:
    its name in words, as OpenAI gives it ("english")."""
    fmt = body.response_format
    usage = {"type": "duration", "seconds": round(duration, 3)}
    if fmt == "json":
        return msgspec.json.encode({"text": text, "usage": usage}), MEDIA_TYPES[fmt]
    if fmt == "text":
        return (text + "\n").encode(), MEDIA_TYPES[fmt]
    if fmt in ("srt", "vtt"):
        return subtitles(segments, vtt=fmt == "vtt").encode(), MEDIA_TYPES[fmt]
    answer: dict[str, Any] = {
        "task": "transcribe",
        "language": language or "unknown",
        "duration": round(duration, 3),
        "text": text,
        "segments": list(segments),
        "usage": usage,
    }
    return msgspec.json.encode(answer), MEDIA_TYPES[fmt]
