"""The plain rules of LightOnOCR-2 extraction as the reference server applies them
(sie-server 0.10.1's ``lighton_ocr`` adapter, its ``transformers`` profile), free of
torch: the chat messages (the system prompt, the page image, the instruction if
any), the generation settings a request may override, and the one ``markdown``
entity the answer becomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sift_server.errors import InvalidInput

DEFAULT_SYSTEM_PROMPT = "You are an OCR engine. Return the markdown representation of the document."
DEFAULT_MAX_NEW_TOKENS = 4096
DEFAULT_NUM_BEAMS = 1
MAX_NEW_TOKENS_LIMIT = 16384
NUM_BEAMS_LIMIT = 8
MARKDOWN = "markdown"


@dataclass(frozen=True, slots=True)
class LightOnOcrRequest:
    instruction: str | None
    max_new_tokens: int
    num_beams: int


def _count(options: Mapping[str, Any], name: str, default: int, limit: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InvalidInput(f"Option '{name}' must be an integer from 1 to {limit}.")
    return value


def resolve_request(
    options: Mapping[str, Any], instruction: str | None, *, max_new_tokens: int, num_beams: int
) -> LightOnOcrRequest:
    """The request's settings: its instruction (an empty one is none, as the reference
    reads it) and the generation lengths it may override."""
    return LightOnOcrRequest(
        instruction=instruction or None,
        max_new_tokens=_count(options, "max_new_tokens", max_new_tokens, MAX_NEW_TOKENS_LIMIT),
        num_beams=_count(options, "num_beams", num_beams, NUM_BEAMS_LIMIT),
    )


def chat_messages(system_prompt: str, instruction: str | None) -> list[dict[str, Any]]:
    """The reference's conversation: the system prompt, then the image and the instruction."""
    user: list[dict[str, str]] = [{"type": "image"}]
    if instruction:
        user.append({"type": "text", "text": instruction})
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


def wire_entities(text: str) -> list[dict[str, Any]]:
    """The decoded page as the reference answers it: one ``markdown`` entity, trimmed."""
    return [{"text": text.strip(), "label": MARKDOWN, "score": 1.0}]


def through_end(row: list[int], end_ids: frozenset[int]) -> list[int]:
    """The new tokens of a row up to its first end token (included): what generating
    that image alone returns; a batch pads the rows that end sooner."""
    for index, token in enumerate(row):
        if token in end_ids:
            return row[: index + 1]
    return row
