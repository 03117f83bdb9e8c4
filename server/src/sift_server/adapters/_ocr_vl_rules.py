"""The plain rules of the OCR vision-language models as the reference server applies
them (sie-server 0.10.1's ``lighton_ocr`` and ``glm_ocr`` adapters in their
``transformers`` profiles, its ``paddleocr_vl`` and ``mineru_vl`` adapters), free of
torch: the chat messages, the generation settings a request may override, and the one
entity the answer becomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sift_server.adapters._extract_common import option_count
from sift_server.errors import InvalidInput

MAX_NEW_TOKENS_LIMIT = 16384
NUM_BEAMS_LIMIT = 8
MARKDOWN = "markdown"

LIGHTON_SYSTEM_PROMPT = "You are an OCR engine. Return the markdown representation of the document."
LIGHTON_MAX_NEW_TOKENS = 4096

# PaddleOCR-VL-1.5's tasks and their prompts (its model card, as the reference maps them).
PADDLE_TASK_PROMPTS: Mapping[str, str] = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "spotting": "Spotting:",
    "seal": "Seal Recognition:",
}
# The tasks whose answer is Markdown; the others (boxes as text) are labelled by their task.
_PADDLE_MARKDOWN_TASKS = frozenset({"ocr", "table", "formula", "chart"})
PADDLE_DEFAULT_TASK = "ocr"
PADDLE_MAX_NEW_TOKENS = 4096

# GLM-OCR: the reference's default user text (its catalog's ``transformers`` profile).
GLM_USER_TEXT = "Text Recognition:"
GLM_MAX_NEW_TOKENS = 8192

# MinerU2.5's tasks and their prompts (mineru_vl_utils' client, as the reference maps them: the
# bracketed names and the prompts' leading newline are theirs), and the answer's label per task.
MINERU_TASK_PROMPTS: Mapping[str, str] = {
    "[default]": "\nText Recognition:",
    "table": "\nTable Recognition:",
    "equation": "\nFormula Recognition:",
    "image": "\nImage Analysis:",
    "chart": "\nImage Analysis:",
    "[layout]": "\nLayout Detection:",
}
_MINERU_LABEL_SUFFIX: Mapping[str, str] = {"[default]": "text", "[layout]": "layout"}
MINERU_DEFAULT_TASK = "[default]"
MINERU_MAX_NEW_TOKENS = 4096
# The reference bans any repeat of a 100-token sequence (its guard against runaway loops).
MINERU_NO_REPEAT_NGRAM_SIZE = 100


@dataclass(frozen=True, slots=True)
class ChatOcrRequest:
    """One request's settings: the text after the image (``None``: none), the answer's
    label, and the generation lengths."""

    text: str | None
    label: str
    max_new_tokens: int
    num_beams: int


def _lengths(options: Mapping[str, Any], max_new_tokens: int, num_beams: int) -> tuple[int, int]:
    return (
        option_count(options, "max_new_tokens", max_new_tokens, MAX_NEW_TOKENS_LIMIT),
        option_count(options, "num_beams", num_beams, NUM_BEAMS_LIMIT),
    )


def lighton_request(
    options: Mapping[str, Any], instruction: str | None, *, max_new_tokens: int, num_beams: int
) -> ChatOcrRequest:
    """LightOnOCR-2: the instruction (an empty one is none, as the reference reads it)
    follows the image; the answer is Markdown."""
    new_tokens, beams = _lengths(options, max_new_tokens, num_beams)
    return ChatOcrRequest(instruction or None, MARKDOWN, new_tokens, beams)


def lighton_messages(system_prompt: str, text: str | None) -> list[dict[str, Any]]:
    """The reference's LightOnOCR-2 conversation: the system prompt, then the image and the text."""
    user: list[dict[str, str]] = [{"type": "image"}]
    if text:
        user.append({"type": "text", "text": text})
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


def paddle_task(value: Any) -> str:
    if not isinstance(value, str) or value not in PADDLE_TASK_PROMPTS:
        raise InvalidInput(f"Option 'task' must be one of {', '.join(PADDLE_TASK_PROMPTS)}; got {value!r}.")
    return value


def paddle_request(
    options: Mapping[str, Any], instruction: str | None, *, default_task: str, max_new_tokens: int, num_beams: int
) -> ChatOcrRequest:
    """PaddleOCR-VL: ``options.task`` picks the prompt, which the instruction replaces if
    sent; Markdown tasks answer ``markdown``, the others their task's name."""
    task = paddle_task(options.get("task", default_task))
    new_tokens, beams = _lengths(options, max_new_tokens, num_beams)
    label = MARKDOWN if task in _PADDLE_MARKDOWN_TASKS else task
    return ChatOcrRequest(instruction or PADDLE_TASK_PROMPTS[task], label, new_tokens, beams)


def paddle_messages(text: str | None) -> list[dict[str, Any]]:
    """The reference's PaddleOCR-VL conversation: one user turn, the image then the prompt."""
    return user_turn(text)


def glm_request(
    options: Mapping[str, Any], instruction: str | None, *, user_text: str, max_new_tokens: int, num_beams: int
) -> ChatOcrRequest:
    """GLM-OCR: the instruction replaces the catalog's user text; the answer is Markdown.
    The reference reads no ``task`` option for this model (its prompt is the text)."""
    new_tokens, beams = _lengths(options, max_new_tokens, num_beams)
    return ChatOcrRequest(instruction or user_text, MARKDOWN, new_tokens, beams)


def mineru_task(value: Any) -> str:
    if not isinstance(value, str) or value not in MINERU_TASK_PROMPTS:
        raise InvalidInput(f"Option 'task' must be one of {', '.join(MINERU_TASK_PROMPTS)}; got {value!r}.")
    return value


def mineru_request(
    options: Mapping[str, Any], instruction: str | None, *, default_task: str, max_new_tokens: int, num_beams: int
) -> ChatOcrRequest:
    """MinerU2.5: ``options.task`` picks the prompt, which the instruction replaces if
    sent; the answer is labelled ``mineru_`` and the task (``text`` for ``[default]``,
    ``layout`` for ``[layout]``)."""
    task = mineru_task(options.get("task", default_task))
    new_tokens, beams = _lengths(options, max_new_tokens, num_beams)
    label = f"mineru_{_MINERU_LABEL_SUFFIX.get(task, task)}"
    return ChatOcrRequest(instruction or MINERU_TASK_PROMPTS[task], label, new_tokens, beams)


def user_turn(text: str | None) -> list[dict[str, Any]]:
    """One user turn: the image, then the prompt (PaddleOCR-VL's, GLM-OCR's and MinerU's chat)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text or ""}]}]


def wire_entities(text: str, label: str) -> list[dict[str, Any]]:
    """The decoded page as the reference answers it: one entity, trimmed."""
    return [{"text": text.strip(), "label": label, "score": 1.0}]


def through_end(row: list[int], end_ids: frozenset[int]) -> list[int]:
    """The new tokens of a row up to its first end token (included): what generating
    that image alone returns; a batch pads the rows that end sooner."""
    for index, token in enumerate(row):
        if token in end_ids:
            return row[: index + 1]
    return row
