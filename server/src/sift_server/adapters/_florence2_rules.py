"""The plain rules of Florence-2 extraction as the reference server applies them
(sie-server 0.10.1's ``florence2`` adapter and its prompt resolution), free of torch:
which task a request runs, the prompt it sends, the generation settings it may
override, and how the processor's post-processed answer becomes the wire's
``entities`` and ``objects``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sift_server.adapters._detection_rules import wire_bbox
from sift_server.adapters._extract_common import option_count
from sift_server.errors import InvalidInput

OCR = "<OCR>"
OCR_WITH_REGION = "<OCR_WITH_REGION>"
OD = "<OD>"
DENSE_REGION_CAPTION = "<DENSE_REGION_CAPTION>"
REGION_PROPOSAL = "<REGION_PROPOSAL>"
CAPTION = "<CAPTION>"
DETAILED_CAPTION = "<DETAILED_CAPTION>"
DOCVQA = "<DocVQA>"

# Tasks whose answer the reference turns into entities or objects. It runs the others
# too (<MORE_DETAILED_CAPTION>, grounding, segmentation) but answers nothing for them:
# Sift refuses those instead of spending a generation on an empty answer.
SERVED_TASKS = (OCR, OCR_WITH_REGION, OD, DENSE_REGION_CAPTION, REGION_PROPOSAL, CAPTION, DETAILED_CAPTION, DOCVQA)
_BOX_TASKS = (OD, DENSE_REGION_CAPTION, REGION_PROPOSAL)
# Every task token Florence-2 knows: an instruction starting with one is sent verbatim.
_KNOWN_TASKS = frozenset(
    {
        *SERVED_TASKS,
        "<MORE_DETAILED_CAPTION>",
        "<CAPTION_TO_PHRASE_GROUNDING>",
        "<REFERRING_EXPRESSION_SEGMENTATION>",
        "<REGION_TO_SEGMENTATION>",
        "<OPEN_VOCABULARY_DETECTION>",
        "<REGION_TO_CATEGORY>",
        "<REGION_TO_DESCRIPTION>",
        "<REGION_TO_OCR>",
    }
)

# The reference's defaults when its catalog entry does not say.
DEFAULT_TASK = OCR_WITH_REGION
DEFAULT_MAX_NEW_TOKENS = 1024
DEFAULT_NUM_BEAMS = 1
# Bounds Sift puts on the per-request overrides (the reference takes any value).
MAX_NEW_TOKENS_LIMIT = 4096
NUM_BEAMS_LIMIT = 8


@dataclass(frozen=True, slots=True)
class Florence2Request:
    """What one request runs: the prompt, the task its answer is parsed as, and how it generates."""

    prompt: str
    task: str
    max_new_tokens: int
    num_beams: int


def _leading_task(text: str) -> str | None:
    if not text.startswith("<"):
        return None
    end = text.find(">")
    token = text[: end + 1] if end != -1 else ""
    return token if token in _KNOWN_TASKS else None


def _check_served(task: str, where: str) -> None:
    if task in SERVED_TASKS:
        return
    if task in _KNOWN_TASKS:
        raise InvalidInput(
            f"{where} {task}: the reference server answers no entities or objects for it, so Sift does not run it; "
            f"served tasks: {', '.join(SERVED_TASKS)}."
        )
    raise InvalidInput(f"{where} {task!r} is not a Florence-2 task; served tasks: {', '.join(SERVED_TASKS)}.")


def resolve_prompt(task: str, instruction: str | None) -> tuple[str, str]:
    """The prompt and the task its answer is parsed as. An instruction is a question
    answered through ``<DocVQA>``, unless it starts with a task token (then it is the
    prompt, verbatim); without one, the task's token alone is the prompt."""
    if instruction and instruction.strip():
        text = instruction.strip()
        token = _leading_task(text)
        if token is None:
            return f"{DOCVQA}{text}", DOCVQA
        _check_served(token, "instruction task")
        body = text[len(token) :].strip()
        if body and token != DOCVQA:
            raise InvalidInput(f"instruction: task {token} takes no text after it.")
        return (f"{token}{body}" if body else token), token
    _check_served(task, "options.task")
    return task, task


def resolve_request(
    options: Mapping[str, Any], instruction: str | None, *, default_task: str, max_new_tokens: int, num_beams: int
) -> Florence2Request:
    """A request's task (``options.task``, else the catalog's), prompt and generation settings."""
    task = options.get("task", default_task)
    if not isinstance(task, str):
        raise InvalidInput("Option 'task' must be a string such as '<CAPTION>'.")
    prompt, effective = resolve_prompt(task, instruction)
    return Florence2Request(
        prompt=prompt,
        task=effective,
        max_new_tokens=option_count(options, "max_new_tokens", max_new_tokens, MAX_NEW_TOKENS_LIMIT),
        num_beams=option_count(options, "num_beams", num_beams, NUM_BEAMS_LIMIT),
    )


def quad_bbox(quad: Sequence[float]) -> list[int]:
    """A quadrilateral's bounding rectangle as the wire's ``[x, y, w, h]`` in pixels."""
    xs, ys = quad[0::2], quad[1::2]
    return wire_bbox([min(xs), min(ys), max(xs), max(ys)])


def wire_answer(parsed: Mapping[str, Any], task: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``post_process_generation``'s answer for ``task`` as the wire's entities and objects."""
    answer = parsed.get(task, {})
    entities: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    if task == OCR_WITH_REGION:
        for quad, text in zip(answer.get("quad_boxes", []), answer.get("labels", []), strict=False):
            entities.append({"text": str(text), "label": "text", "score": 1.0, "bbox": quad_bbox(quad)})
    elif task in _BOX_TASKS:
        for box, label in zip(answer.get("bboxes", []), answer.get("labels", []), strict=False):
            objects.append({"label": str(label) or "object", "score": 1.0, "bbox": wire_bbox(box)})
    else:
        label = {OCR: "text", CAPTION: "caption", DETAILED_CAPTION: "caption", DOCVQA: "answer"}[task]
        entities.append({"text": answer if isinstance(answer, str) else str(answer), "label": label, "score": 1.0})
    return entities, objects
