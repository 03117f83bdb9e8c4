"""zerank-2's layout (``input_format: zerank`` of ``llm-reranker``): a causal LM saved as a
sentence-transformers CrossEncoder whose two modules are a text-generation ``Transformer``
(a pair is a chat: the query in the role ``query``, the document in the role ``document``,
rendered by the folder's own chat template with its generation prompt) and a
``LogitScore`` that reads the raw logit of one token at the last position, through an
Identity activation. That is what the reference server's ``native_causal_cross_encoder``
adapter runs (sentence-transformers 5.7's ``CrossEncoder``); this module reads the folder's
JSON files, refuses any other stack, and builds the same token rows.

The reference never cuts a row: a pair whose whole row (template tokens included) is longer
than the limit is refused (``INPUT_TOO_LONG``), and so is an instruction (the model's
conditions belong in the query)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._st_layout import read_json
from sift_server.errors import InputTooLong, InvalidInput

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from sift_server.adapters.base import ScoreTask

ADAPTER = "llm-reranker"
TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"
LOGIT_SCORE = "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"
IDENTITY = "torch.nn.modules.linear.Identity"
# How sentence-transformers turns a (query, document) pair into chat messages.
QUERY_ROLE, DOCUMENT_ROLE = "query", "document"
# The publisher's format, checked on a probe at load (as the reference server checks it).
PROBE_QUERY, PROBE_DOCUMENT = "Query\n東京", "Document\nsource-tail-✓"
PUBLISHER_FORM = (
    "<|im_start|>system\n{query}<|im_end|>\n<|im_start|>user\n{document}<|im_end|>\n<|im_start|>assistant\n"
)


@dataclass(frozen=True, slots=True)
class NativeLayout:
    """What the folder's CrossEncoder files ask for: the token whose logit is the score."""

    true_token_id: int


def _refuse(folder: Path, reason: str) -> UnservableModel:
    return UnservableModel(
        f"{ADAPTER} (input_format: zerank) cannot serve {folder} exactly: {reason}. It serves the "
        "sentence-transformers CrossEncoder stack of zerank-2 (Transformer for text generation with the "
        "chat template's generation prompt, then LogitScore on one token with an Identity activation)."
    )


def read_native_layout(folder: Path) -> NativeLayout:
    """The folder's CrossEncoder stack, or a refusal naming what differs (pure: JSON files in)."""
    modules = read_json_list(folder / "modules.json")
    types = [str(entry.get("type", "")) for entry in modules]
    if types != [TRANSFORMER, LOGIT_SCORE]:
        raise _refuse(folder, f"its modules.json lists {types or 'no modules'}")
    transformer = read_json(folder / str(modules[0].get("path") or "") / "sentence_bert_config.json")
    if transformer.get("transformer_task") != "text-generation":
        raise _refuse(folder, f"its Transformer task is {transformer.get('transformer_task')!r}")
    if transformer.get("module_output_name") != "causal_logits":
        raise _refuse(folder, f"its Transformer outputs {transformer.get('module_output_name')!r}")
    processing = transformer.get("processing_kwargs") or {}
    if not isinstance(processing, dict) or processing.get("chat_template") != {"add_generation_prompt": True}:
        raise _refuse(folder, f"its processing_kwargs are {processing!r}")
    text_kwargs = processing.get("text") or {}
    if set(processing) - {"chat_template", "text"} or not isinstance(text_kwargs, dict) or text_kwargs:
        raise _refuse(folder, f"its processing_kwargs are {processing!r}")
    if transformer.get("do_lower_case"):
        raise _refuse(folder, "it lower-cases its input")
    activation = read_json(folder / "config_sentence_transformers.json").get("activation_fn")
    if activation != IDENTITY:
        raise _refuse(folder, f"its activation is {activation!r}, not the raw logit")
    score = read_json(folder / str(modules[1].get("path") or "") / "config.json")
    true_id = score.get("true_token_id")
    if isinstance(true_id, bool) or not isinstance(true_id, int) or true_id < 0:
        raise _refuse(folder, f"its LogitScore true_token_id is {true_id!r}")
    if score.get("false_token_id") is not None:
        raise _refuse(folder, "its LogitScore subtracts a false token's logit")
    if score.get("module_input_name", "causal_logits") != "causal_logits":
        raise _refuse(folder, f"its LogitScore reads {score.get('module_input_name')!r}")
    return NativeLayout(true_token_id=true_id)


def read_json_list(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def is_native_layout(folder: Path) -> bool:
    """Whether the folder is saved as a CrossEncoder scoring one token's raw logit (then only
    ``zerank`` serves it: the other formats build their own prompt and subtract a second logit)."""
    for entry in read_json_list(folder / "modules.json"):
        if entry.get("type") == LOGIT_SCORE:
            score = read_json(folder / str(entry.get("path") or "") / "config.json")
            return score.get("false_token_id") is None
    return False


class ChatPairPrompt:
    """Each pair rendered by the folder's chat template and tokenized whole, as the reference
    does (``apply_chat_template`` renders, then the text is tokenized without special tokens)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int, folder: Path) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        template = getattr(tokenizer, "chat_template", None)
        if not isinstance(template, str) or not template:
            raise _refuse(folder, "its tokenizer has no chat template")
        rendered = self.render(PROBE_QUERY, PROBE_DOCUMENT)
        if rendered != PUBLISHER_FORM.format(query=PROBE_QUERY, document=PROBE_DOCUMENT):
            raise _refuse(folder, f"its chat template renders a pair as {rendered!r}")

    def render(self, query: str, document: str) -> str:
        messages = [{"role": QUERY_ROLE, "content": query}, {"role": DOCUMENT_ROLE, "content": document}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return str(text)

    def limit(self, task: ScoreTask) -> int:
        """The request's ``max_seq_length`` option (it may only lower the entry's limit)."""
        value = task.options.get("max_seq_length", self.max_length)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= self.max_length:
            raise InvalidInput(f"max_seq_length must be an integer from 1 to {self.max_length}.")
        return value

    def rows(self, task: ScoreTask) -> list[list[int]]:
        """One whole row per text; a row over the limit is refused, never cut."""
        if task.instruction:
            raise InvalidInput("This model takes no instruction: put its conditions in the query.")
        limit = self.limit(task)
        rows: list[list[int]] = []
        for index, text in enumerate(task.texts):
            ids: list[int] = self.tokenizer.encode(self.render(task.query, text), add_special_tokens=False)
            if len(ids) > limit:
                raise InputTooLong(
                    f"Item {index}: the query and text take {len(ids)} tokens with the model's chat template, "
                    f"more than its {limit}; this model reads whole rows only.",
                    index=index,
                )
            rows.append(ids)
        return rows
