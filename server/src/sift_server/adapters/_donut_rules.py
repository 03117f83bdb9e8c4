"""The plain rules of Donut extraction as the reference server applies them
(sie-server 0.10.1's ``donut`` adapter), free of torch: the decoder prompt, the
generation settings a request may override, the clean-up of the generated text, and
how ``token2json``'s answer becomes the wire's entities.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sift_server.adapters._extract_common import option_count
from sift_server.errors import InvalidInput

CORD = "<s_cord-v2>"
DOCVQA = "<s_docvqa>"
RVLCDIP = "<s_rvlcdip>"
DEFAULT_TASK = CORD
DEFAULT_MAX_NEW_TOKENS = 512
DEFAULT_NUM_BEAMS = 1
MAX_NEW_TOKENS_LIMIT = 4096
NUM_BEAMS_LIMIT = 8
_TASK = re.compile(r"<s_[^<>\s]+>")
_FIRST_TASK = re.compile(r"<s_\w+>")


@dataclass(frozen=True, slots=True)
class DonutRequest:
    prompt: str
    task: str
    max_new_tokens: int
    num_beams: int


def resolve_request(
    options: Mapping[str, Any], instruction: str | None, *, default_task: str, max_new_tokens: int, num_beams: int
) -> DonutRequest:
    """The decoder prompt: the task token, and for ``<s_docvqa>`` the instruction as its question."""
    task = options.get("task", default_task)
    if not isinstance(task, str) or not _TASK.fullmatch(task):
        raise InvalidInput("Option 'task' must be a Donut task token such as '<s_cord-v2>'.")
    prompt = f"{task}<s_question>{instruction}</s_question><s_answer>" if task == DOCVQA and instruction else task
    return DonutRequest(
        prompt=prompt,
        task=task,
        max_new_tokens=option_count(options, "max_new_tokens", max_new_tokens, MAX_NEW_TOKENS_LIMIT),
        num_beams=option_count(options, "num_beams", num_beams, NUM_BEAMS_LIMIT),
    )


def clean_sequence(text: str, eos_token: str, pad_token: str) -> str:
    """The decoded sequence without its end and padding tokens and its first task token."""
    text = text.replace(eos_token, "").replace(pad_token, "")
    return _FIRST_TASK.sub("", text, count=1).strip()


def fallback_json(text: str) -> Any:
    """What the reference answers when ``token2json`` fails: the text as JSON, else ``{"raw": text}``."""
    text = re.sub(r"<[^>]+>", "", text.strip())
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"raw": text}


def _fields(value: Any, prefix: str, out: list[dict[str, Any]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            label = f"{prefix}.{key}" if prefix else key
            if isinstance(inner, str):
                out.append({"text": inner, "label": label, "score": 1.0})
            else:
                _fields(inner, label, out)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _fields(inner, f"{prefix}[{index}]", out)


def wire_entities(parsed: Any, task: str) -> list[dict[str, Any]]:
    """``token2json``'s answer as the wire's entities: every text field (CORD), the
    answer (DocVQA) or the class (RVL-CDIP); other tasks answer none."""
    if task == CORD:
        out: list[dict[str, Any]] = []
        _fields(parsed, "", out)
        return out
    name, label = {DOCVQA: ("answer", "answer"), RVLCDIP: ("class", "document_class")}.get(task, ("", ""))
    if not name or not isinstance(parsed, dict):
        return []
    value = parsed.get(name, parsed.get("raw", ""))
    return [{"text": value, "label": label, "score": 1.0}] if value else []
