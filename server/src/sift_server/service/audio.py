"""Audio files to samples: PyAV (FFmpeg's demuxers, decoders and resampler) reads any
container OpenAI accepts (wav, flac, mp3, mp4/m4a, ogg, webm) and resamples to the
model's rate, mono float32. Runs in the prep thread, never on the event loop.

The duration limit is checked from the container's header before anything is
decoded where the header says it (WAV, FLAC, MP4 and most others), and again while
decoding for a stream that does not say (or lies): decoding stops at the limit.
Every failure is an ``InvalidInput`` naming ``file``, so a bad file is a 400 for
its request alone."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from sift_server.errors import InvalidInput

# Long-form transcription runs 30 s windows one after the other in one forward, which
# holds the model's forward thread; ten minutes keeps that under a minute or so on a
# CPU core with whisper-base (docs/speech.md).
MAX_AUDIO_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class AudioLimits:
    max_seconds: float = MAX_AUDIO_SECONDS


def _too_long(seconds: float, limits: AudioLimits) -> InvalidInput:
    return InvalidInput(
        f"The audio is {seconds:.1f} s long; this server transcribes at most {limits.max_seconds:.0f} s.",
        param="file",
    )


def decode_audio(data: bytes, sampling_rate: int, limits: AudioLimits) -> np.ndarray:
    """Mono float32 samples at ``sampling_rate``; InvalidInput for an empty, corrupt,
    silent-less (no audio stream) or too long file."""
    import av

    if not data:
        raise InvalidInput("The audio file is empty.", param="file")
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise InvalidInput(f"The file is not audio that can be decoded: {exc}", param="file") from None
    with container:
        if not container.streams.audio:
            raise InvalidInput("The file has no audio stream.", param="file")
        stream = container.streams.audio[0]
        declared = _declared_seconds(container, stream)
        if declared is not None and declared > limits.max_seconds + 0.5:
            raise _too_long(declared, limits)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sampling_rate)
        cap = int(limits.max_seconds * sampling_rate)
        chunks: list[np.ndarray] = []
        total = 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().reshape(-1)
                    chunks.append(chunk)
                    total += chunk.shape[0]
                if total > cap:
                    raise _too_long(total / sampling_rate, limits)
            for out in resampler.resample(None):
                chunk = out.to_ndarray().reshape(-1)
                chunks.append(chunk)
                total += chunk.shape[0]
        except (av.FFmpegError, ValueError, OSError) as exc:
            raise InvalidInput(f"The audio could not be decoded: {exc}", param="file") from None
    if total > cap:
        raise _too_long(total / sampling_rate, limits)
    if total == 0:
        raise InvalidInput("The file holds no audio samples.", param="file")
    return np.concatenate(chunks).astype(np.float32, copy=False)


def _declared_seconds(container: object, stream: object) -> float | None:
    """The duration the header declares (stream's, else the container's), if any."""
    duration = getattr(stream, "duration", None)
    time_base = getattr(stream, "time_base", None)
    if duration is not None and time_base is not None:
        return float(duration * time_base)
    whole = getattr(container, "duration", None)  # in microseconds (av.time_base)
    return None if whole is None else float(whole) / 1_000_000
