"""Rerankers built on causal language models (Qwen3-Reranker, mxbai-rerank-v2): the
relevance of a (query, document) pair is read from the model's logits for its two answer
tokens at the last position of its own judging prompt: ``sigmoid(logit(yes) - logit(no))``
(the Qwen3 model card's log-softmax over [no, yes], then exp; ``score_mode: log_softmax``),
or the raw difference ``logit(yes) - logit(no)`` (``score_mode: logit_diff``, mxbai's).

The prompt is the Qwen3-Reranker model card's ("Usage" on
huggingface.co/Qwen/Qwen3-Reranker-0.6B, and the reference server's ``qwen3``
input format): a system turn asking for "yes" or "no", a user turn
``<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {document}``, and an
assistant turn opened with an empty think block. The instruction is the
request's, else the entry's ``default_instruction``, else the model card's.

The mxbai prompt (``input_format: mxbai``, answer tokens ``1`` and ``0``; the
mxbai-rerank library's ``MxbaiRerankV2`` and the reference server's default format): a
system turn, a user turn ``query: {query}\ndocument: {document}\n`` and the task
prompt, an assistant turn. It takes no instruction (the reference server ignores one).

The pieces are tokenized apart, as the reference server does, so a long document
is cut to fit and the instruction and query are kept whole.

The zerank-2 layout (``input_format: zerank``, the reference server's
``native_causal_cross_encoder``): the folder's own chat template renders the pair (the
query as a system turn, the document as a user turn) and the score is the raw logit of
the one token its sentence-transformers ``LogitScore`` names (``score_mode: logit``);
rows are whole, never cut (see ``_chat_pair_prompt``).

Pairs are independent: every score request may share a forward with any other,
the engine batches them like the cross-encoder's. The batch is padded on the
left, so the last position is every row's last token. PyTorch only
(transformers' ``AutoModelForCausalLM``, the two answer rows of its output head).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sift_server.adapters._chat_pair_prompt import ChatPairPrompt, is_native_layout, read_native_layout
from sift_server.adapters._probes import BATCH, PROBE_QUERY, PROBE_TEXTS
from sift_server.adapters._st_layout import read_json, read_layout
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.request import REFERENCE
from sift_server.adapters.backends.seam import Graph, Runner
from sift_server.adapters.backends.select import SCORES, select
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, ScoreTask, TaskInput
from sift_server.adapters.decoder_embedder import pad_left
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

ADAPTER = "llm-reranker"
SCORE_COMPAT_KEY = "score"

# The Qwen3-Reranker model card's template (see the module docstring).
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
USER = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: "
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

# The mxbai-rerank-v2 template (the mxbai-rerank library's MxbaiRerankV2).
MXBAI_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MXBAI_PREFIX = f"<|im_start|>system\n{MXBAI_SYSTEM}<|im_end|>\n<|im_start|>user\n"
MXBAI_TASK = (
    "You are a search relevance expert who evaluates how well documents match search queries. "
    "For each query-document pair, carefully analyze the semantic relationship between them, then provide "
    "your binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:"
)
MXBAI_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True, slots=True)
class Format:
    """A prompt family: its answer tokens and how their logits become a score."""

    name: str
    yes: str
    no: str
    score_mode: str


FORMATS = {
    "qwen3": Format("qwen3", "yes", "no", "log_softmax"),
    "mxbai": Format("mxbai", "1", "0", "logit_diff"),
    # The answer token is the folder's (its LogitScore config), not a word.
    "zerank": Format("zerank", "", "", "logit"),
}
SCORE_MODES = ("log_softmax", "logit_diff", "logit")


class _AnswerLogits(Graph):
    """The causal LM: (input_ids, attention_mask), padded on the left -> logit(yes) - logit(no)
    at the last position, or logit(yes) alone without a ``no`` token."""

    kind = "llm-reranker"
    inputs = ("input_ids", "attention_mask")
    output = "relevance_logit"

    def __init__(self, folder: Any, yes_id: int, no_id: int | None) -> None:
        super().__init__(folder)
        self.yes_id, self.no_id = yes_id, no_id

    def build_module(self) -> torch.nn.Module:
        import torch
        from transformers import AutoModelForCausalLM

        yes_id, no_id = self.yes_id, self.no_id

        class Module(torch.nn.Module):
            def __init__(self, model: torch.nn.Module) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                # logits_to_keep=1: the output head runs on the last position only.
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits
                last: torch.Tensor = logits[:, -1]
                if no_id is None:
                    return last[:, yes_id]
                return last[:, yes_id] - last[:, no_id]

        return Module(AutoModelForCausalLM.from_pretrained(self.folder, local_files_only=True))

    def key_parts(self) -> dict[str, Any]:
        return {"yes": self.yes_id, "no": self.no_id}


def _one_token(tokenizer: PreTrainedTokenizerBase, word: str) -> int:
    """The id of ``word`` (its first token, as the reference server takes it)."""
    ids: list[int] = tokenizer.encode(word, add_special_tokens=False)
    if not ids:
        raise ValueError(f"the tokenizer has no token for {word!r}")
    return int(ids[0])


class PairRows(Protocol):
    """A prompt family's rows: one token row per text of a score task."""

    max_length: int

    def rows(self, task: ScoreTask) -> list[list[int]]: ...


class Prompt:
    """The model's prompt around each pair, as token ids (pure: a tokenizer in, rows out)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, max_length: int, default_instruction: str, input_format: str = "qwen3"
    ) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.default_instruction = default_instruction
        self.input_format = input_format
        if input_format == "mxbai":
            self.prefix_ids = self.ids(MXBAI_PREFIX)
            self.suffix_ids = self.ids("\n") + self.ids(MXBAI_TASK) + self.ids(MXBAI_SUFFIX)
        else:
            self.prefix_ids = self.ids(PREFIX)
            self.suffix_ids = self.ids(SUFFIX)

    def ids(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def _head(self, task: ScoreTask) -> list[int]:
        if self.input_format == "mxbai":
            return self.prefix_ids + self.ids(f"query: {task.query}") + self.ids("\n")
        instruction = task.instruction or self.default_instruction
        return self.prefix_ids + self.ids(USER.format(instruction=instruction, query=task.query))

    def _document(self, text: str) -> list[int]:
        return self.ids(f"document: {text}") if self.input_format == "mxbai" else self.ids(text)

    def rows(self, task: ScoreTask) -> list[list[int]]:
        """One row per text: prefix, instruction and query, the text (cut to fit unless
        ``overflow`` is ``error``), suffix."""
        head = self._head(task)
        room = self.max_length - len(head) - len(self.suffix_ids)
        if room < 0:
            raise InputTooLong(
                f"The instruction and query take {len(head) + len(self.suffix_ids)} tokens with the prompt, "
                f"more than the model's {self.max_length}."
            )
        rows: list[list[int]] = []
        for index, text in enumerate(task.texts):
            document = self._document(text)
            if len(document) > room:
                if task.overflow == "error":
                    raise InputTooLong(
                        f"Item {index}: the prompt, query and text take "
                        f"{len(head) + len(document) + len(self.suffix_ids)} tokens, more than the model's "
                        f"{self.max_length}.",
                        index=index,
                    )
                document = document[:room]
            rows.append(head + document + self.suffix_ids)
        return rows


def _native_token(folder: Path) -> int:
    """The token whose raw logit is the score, from the folder's LogitScore (checked in range)."""
    token = read_native_layout(folder).true_token_id
    vocab_size = read_json(folder / "config.json").get("vocab_size")
    if isinstance(vocab_size, int) and token >= vocab_size:
        raise ValueError(f"{folder}: the LogitScore token {token} is outside the vocabulary of {vocab_size}")
    return token


def _format(options: Mapping[str, Any]) -> Format:
    """The entry's ``input_format`` with its answer tokens and score mode, each overridable."""
    name = str(options.get("input_format") or "qwen3")
    if name not in FORMATS:
        raise ValueError(f"input_format must be one of {sorted(FORMATS)}, not {name!r}")
    preset = FORMATS[name]
    score_mode = str(options.get("score_mode") or preset.score_mode)
    if score_mode not in SCORE_MODES:
        raise ValueError(f"score_mode must be one of {list(SCORE_MODES)}, not {score_mode!r}")
    return Format(
        name, str(options.get("yes_token") or preset.yes), str(options.get("no_token") or preset.no), score_mode
    )


class LlmRerankerAdapter(Adapter):
    def __init__(
        self,
        prompt: PairRows,
        runner: Runner,
        *,
        pad_id: int,
        runtime: Mapping[str, Any],
        score_mode: str = "log_softmax",
    ) -> None:
        self.prompt = prompt
        self.runner = runner
        self.pad_id = pad_id
        self.score_mode = score_mode
        self.info = AdapterInfo(
            tasks=frozenset({"score"}),
            outputs=("score",),
            max_sequence_length=prompt.max_length,
            runtime=runtime,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> LlmRerankerAdapter:
        from transformers import AutoTokenizer

        layout = read_layout(ctx.path)
        if not layout.is_decoder:
            raise layout.fail(ADAPTER, f"{layout.model_type or 'the model'} is not a causal language model")
        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"{ADAPTER} runs on PyTorch only, not {ctx.backend!r}")
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        form = _format(ctx.options)
        max_length = int(ctx.max_sequence_length or 8192)
        prompt: PairRows
        no_id: int | None
        if form.name == "zerank":
            yes_id, no_id = _native_token(ctx.path), None
            prompt = ChatPairPrompt(tokenizer, max_length, ctx.path)
        else:
            if is_native_layout(ctx.path):
                raise layout.fail(
                    ADAPTER,
                    "the folder is a CrossEncoder scoring the raw logit of one token over its chat template",
                    "Serve it with input_format: zerank.",
                )
            yes_id, no_id = _one_token(tokenizer, form.yes), _one_token(tokenizer, form.no)
            default_instruction = str(ctx.options.get("default_instruction") or DEFAULT_INSTRUCTION)
            prompt = Prompt(tokenizer, max_length, default_instruction, form.name)
        pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        device = str(ctx.options.get("device") or "cpu")
        probe_rows = prompt.rows(ScoreTask(query=PROBE_QUERY, texts=PROBE_TEXTS))

        def evaluate(runner: Runner) -> np.ndarray:
            return np.concatenate(
                [_relevance(runner, probe_rows[i : i + BATCH], pad_id) for i in range(0, len(probe_rows), BATCH)]
            )

        # The record runs it on PyTorch only: plan_load plans no background decision for it, so
        # ``auto`` must not export and time candidates here either; the reference is the one choice.
        runner, runtime = select(
            ctx,
            _AnswerLogits(ctx.path, yes_id, no_id),
            evaluate,
            SCORES,
            open_runner,
            device=device,
            probe_key=f"{max_length}",
            supported=(REFERENCE,),
        )
        return cls(prompt, runner, pad_id=pad_id, runtime=runtime, score_mode=form.score_mode)

    # ---- prepare (event loop) -------------------------------------------

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ScoreTask):
            raise InvalidInput("This model only supports the score task.")
        if not task.texts:
            raise InvalidInput("score needs at least one item")
        rows = self.prompt.rows(task)
        costs = [len(row) for row in rows]
        return Prepared(item_costs=costs, compat_key=SCORE_COMPAT_KEY, payload=rows, input_tokens=sum(costs))

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        rows = [row for part in parts for row in part.prepared.payload[part.start : part.stop]]
        logits = _relevance(self.runner, rows, self.pad_id).astype(np.float64)
        scores = 1.0 / (1.0 + np.exp(-logits)) if self.score_mode == "log_softmax" else logits
        return split_by_parts([float(s) for s in scores], parts)

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes()

    def close(self) -> None:
        self.runner.close()


def _relevance(runner: Runner, rows: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    input_ids, mask = pad_left(rows, pad_id)
    return runner({"input_ids": input_ids, "attention_mask": mask}).astype(np.float32, copy=False)
