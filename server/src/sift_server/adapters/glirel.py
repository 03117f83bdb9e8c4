"""GLiREL zero-shot relation extraction through the ``glirel`` library (PyPI ``glirel``).

A request names the relation types in ``labels`` and gives each item's entities
in ``metadata.entities`` as ``[{text, label, start, end}]`` (character offsets
into the item's text). The answer, as the reference server shapes it:
``relations: [{head, tail, relation, score}]`` (head and tail are the caller's
entity texts) and the entities echoed in ``entities``.

``prepare`` splits the text into the library's words (its own pattern),
keeps the words the model reads (at most the config's ``max_len`` words, and
what fits the backbone's positions beside the relation-type prompt; with
``overflow_policy: error`` a longer text is a 400), maps each entity's
characters to the words it covers and drops entities past the words read, as
the reference does. ``forward`` calls ``GLiREL.predict_relations`` per item,
the library's own call, with ``threshold`` and ``top_k`` (relations kept per
entity pair).

Loading never downloads. A GLiREL checkpoint names its backbone by hub id
(``microsoft/deberta-v3-large``), which the library would fetch with
``from_pretrained``; Sift builds the backbone from a local folder holding its
``config.json`` and tokenizer (the model folder itself, or the folder in the
catalog's ``options.backbone``) and the checkpoint then sets every weight. A
folder without them, or a checkpoint that leaves any weight unset, is refused
at load.
"""

from __future__ import annotations

import copy
import math
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sift_server.adapters._extract_common import (
    catalog_threshold,
    extract_item,
    reject_options,
    resolve_labels,
    text_extract_task,
)
from sift_server.adapters._torch_runtime import (
    configure_threads,
    module_bytes,
    release_module,
    select_device,
    tokenizer_limit,
)
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput

# The reference adapter's defaults: threshold 0.3 unless the catalog says, 10 relations per entity pair.
DEFAULT_THRESHOLD = 0.3
DEFAULT_TOP_K = 10
# GLiREL scores every pair of an item's entities, so an item may carry at most this many.
MAX_ENTITIES = 256
# Characters per relation type, and tokens of the whole relation-type prompt (the reference's limits).
MAX_LABEL_CHARS = 128
DEFAULT_MAX_PROMPT_TOKENS = 1024
# The library's word pattern (``GLiREL.batch_predict_relations``).
WORD_PATTERN = re.compile(r"\w+(?:[-_]\w+)*|\S")
CONFIG_FILE = "glirel_config.json"
WEIGHTS_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "spm.model", "vocab.json")

# glirel builds its backbone through a module-level name; loads swap it one at a time.
_BACKBONE_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class GlirelItem:
    """One item as the library will read it."""

    words: list[str]
    # [first word, last word (inclusive), label, text] per entity read, the library's ``ner``.
    ner: list[list[Any]]
    # (first word, last word + 1) -> the caller's text, as relations name their ends.
    names: dict[tuple[int, int], str]
    # The request's entities, echoed in the answer.
    echoed: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class GlirelPayload:
    items: list[GlirelItem]
    labels: tuple[str, ...]
    threshold: float
    top_k: int


def text_words(text: str) -> list[tuple[str, int, int]]:
    """The library's words of ``text`` with their character offsets."""
    return [(m.group(), m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]


def backbone_folder(model: Path, options: Mapping[str, Any], backbone_id: str) -> Path:
    """The local folder to build the backbone from, or a ``ValueError`` that says what is missing."""
    named = options.get("backbone")
    if named is not None:
        if not isinstance(named, str) or not named.strip():
            raise ValueError(f"catalog option backbone must be a folder path, not {named!r}")
        folder = Path(named) if Path(named).is_absolute() else model / named
        where = f"options.backbone ({folder})"
    else:
        folder, where = model, f"the model folder ({model})"
    missing = [name for name in ("config.json",) if not (folder / name).is_file()]
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer files")
    if missing:
        raise ValueError(
            f"GLiREL's backbone {backbone_id!r} is not available locally: {where} lacks {' and '.join(missing)}. "
            "Sift never downloads it: put the backbone's config.json and tokenizer files in the model folder, "
            "or name a local folder holding them with options.backbone."
        )
    return folder


@contextmanager
def _backbone_from_config(folder: Path) -> Iterator[None]:
    """Have glirel build its backbone from ``folder``'s config (no weights read, nothing fetched)."""
    import glirel.modules.transformer_embeddings as embeddings
    from transformers import AutoConfig, AutoModel

    class _FromConfig:
        @staticmethod
        def from_pretrained(_name: str, *args: Any, **kwargs: Any) -> Any:
            config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
            return AutoModel.from_config(config)

    with _BACKBONE_LOCK:
        original = embeddings.AutoModel
        embeddings.AutoModel = _FromConfig  # type: ignore[assignment]
        try:
            yield
        finally:
            embeddings.AutoModel = original


def load_glirel(model_folder: Path, options: Mapping[str, Any], device: Any) -> Any:
    """The library's ``GLiREL`` with the checkpoint's weights, its backbone built from a local folder."""
    import torch
    from glirel import GLiREL
    from glirel.model import load_config_as_namespace

    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (model_folder / name).is_file():
            raise ValueError(f"{model_folder} is not a GLiREL folder: it lacks {name}")
    config = load_config_as_namespace(model_folder / CONFIG_FILE)
    folder = backbone_folder(model_folder, options, str(getattr(config, "model_name", "?")))
    config.model_name = str(folder)
    with _backbone_from_config(folder):
        model = GLiREL(config)
    state = torch.load(model_folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    result = model.load_state_dict(state, strict=False, assign=True)
    # Non-persistent buffers are not in a checkpoint; every parameter and saved buffer must be.
    expected = set(model.state_dict())
    missing = sorted(key for key in result.missing_keys if key in expected)
    if missing:
        raise ValueError(
            f"{model_folder / WEIGHTS_FILE} does not set {len(missing)} of the model's weights "
            f"(first: {missing[0]}); its backbone config may not be the checkpoint's"
        )
    model.to(device)
    model.eval()
    return model


class GlirelAdapter(Adapter):
    """Relations between the caller's entities, for a request's relation types."""

    def __init__(self, model: Any, options: Mapping[str, Any], max_tokens: int, device: Any) -> None:
        self.model = model
        self.device = device
        self.threshold = catalog_threshold(options, DEFAULT_THRESHOLD) or 0.0
        self.top_k = _top_k(options.get("top_k", DEFAULT_TOP_K), ValueError)
        prompt_limit = options.get("max_prompt_tokens", DEFAULT_MAX_PROMPT_TOKENS)
        if isinstance(prompt_limit, bool) or not isinstance(prompt_limit, int) or prompt_limit < 1:
            raise ValueError(f"catalog option max_prompt_tokens must be a positive integer, not {prompt_limit!r}")
        self.max_prompt_tokens = prompt_limit
        self.max_tokens = max_tokens
        self.max_words = int(model.base_config.max_len)
        self.markers = bool(getattr(model.base_config, "add_entity_markers", False))
        self.rel_token = str(model.rel_token)
        self.sep_token = str(model.sep_token)
        # prepare (event loop) owns its own copy of the fast tokenizer (forward tokenizes too).
        self._tokenizer = copy.deepcopy(model.token_rep_layer.bert_layer.tokenizer)
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("text",),
            outputs=("entities", "relations"),
            max_sequence_length=max_tokens,
            runtime={"backend": "torch", "precision": "fp32", "selected_by": "adapter (PyTorch fp32 only)"},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> GlirelAdapter:
        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"glirel runs on PyTorch only, not backend {ctx.backend!r}")
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model = load_glirel(Path(ctx.path), ctx.options, device)
        backbone = model.token_rep_layer.bert_layer
        positions = getattr(backbone.model.config, "max_position_embeddings", None)
        limit = tokenizer_limit(backbone.tokenizer, ctx.max_sequence_length, positions)
        return cls(model, ctx.options, limit, device)

    def prepare(self, task: TaskInput) -> Prepared:
        task = text_extract_task(task)
        reject_options(
            task,
            "a GLiREL model",
            flat_ner=task.flat_ner,
            classification_type=task.classification_type,
            label_groups=task.label_groups,
            examples=task.examples,
        )
        if not task.labels:
            raise InvalidInput("GLiREL needs the relation types to look for: pass params.labels")
        labels = resolve_labels(task)
        prompt = self._prompt_tokens(labels)
        threshold = task.threshold if task.threshold is not None else self.threshold
        top_k = _top_k(task.options["top_k"], InvalidInput) if "top_k" in task.options else self.top_k
        metadata = list(task.metadata) or [None] * len(task.texts)
        items: list[GlirelItem] = []
        costs: list[int] = []
        # Every item is checked before any runs, so bad input fails as a 400 before model work.
        for index, text in enumerate(task.texts):
            entities = _entities(index, metadata[index] if index < len(metadata) else None, text)
            item, cost = self._item(index, text, entities, prompt, error=task.overflow == "error")
            items.append(item)
            costs.append(cost)
        payload = GlirelPayload(items, labels, float(threshold), top_k)
        # The library runs one item per call with that item's settings, so every request fuses.
        key = ("glirel",)
        return Prepared(item_costs=costs, compat_key=key, payload=payload, input_tokens=sum(costs))

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        import torch

        outputs: list[list[Any]] = []
        with torch.inference_mode():
            for part in parts:
                payload: GlirelPayload = part.prepared.payload
                outputs.append([self._relations(item, payload) for item in payload.items[part.start : part.stop]])
        return outputs

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)

    def _relations(self, item: GlirelItem, payload: GlirelPayload) -> dict[str, Any]:
        """One item's answer: the library's relations named by the caller's entity texts."""
        found: list[dict[str, Any]] = []
        if item.ner:
            found = self.model.predict_relations(
                item.words,
                list(payload.labels),
                threshold=payload.threshold,
                ner=item.ner,
                top_k=payload.top_k,
            )
        relations = [
            {
                "head": item.names[(int(r["head_pos"][0]), int(r["head_pos"][1]))],
                "tail": item.names[(int(r["tail_pos"][0]), int(r["tail_pos"][1]))],
                "relation": str(r["label"]),
                "score": float(r["score"]),
            }
            for r in found
        ]
        return extract_item(entities=item.echoed) | {"relations": relations}

    def _prompt_tokens(self, labels: tuple[str, ...]) -> int:
        """Tokens of the library's prompt, ``[REL] type ... [REL] type [SEP]``, within the limits."""
        for label in labels:
            if len(label) > MAX_LABEL_CHARS:
                raise InvalidInput(f"GLiREL relation types may have at most {MAX_LABEL_CHARS} characters each.")
        words = [word for label in labels for word in (self.rel_token, label)] + [self.sep_token]
        tokens = len(self._tokenizer(words, is_split_into_words=True, add_special_tokens=False)["input_ids"])
        if tokens > self.max_prompt_tokens:
            raise InvalidInput(
                f"The relation types take {tokens} tokens in GLiREL's prompt; at most {self.max_prompt_tokens}."
            )
        return tokens

    def _item(
        self, index: int, text: str, entities: list[dict[str, Any]], prompt: int, *, error: bool
    ) -> tuple[GlirelItem, int]:
        """The words the model reads (``max_len`` and the backbone's positions), the entities among them."""
        words = text_words(text)
        markers = 2 * len(entities) if self.markers else 0
        counts = self._tokenizer([w for w, _, _ in words], is_split_into_words=True, add_special_tokens=False)
        per_word = [0] * len(words)
        for word in counts.word_ids():
            if word is not None:
                per_word[word] += 1
        specials = self._tokenizer.num_special_tokens_to_add()
        room = self.max_tokens - prompt - specials - markers
        used, keep = 0, 0
        for count in per_word[: self.max_words]:
            if used + count > room:
                break
            used, keep = used + count, keep + 1
        total = prompt + specials + markers + sum(per_word)
        if keep < len(words):
            if error:
                raise InputTooLong(
                    f"item {index}: {len(words)} words / {total} tokens with the relation types; "
                    f"the model reads at most {self.max_words} words and {self.max_tokens} tokens",
                    index=index,
                    tokens=total,
                    max_tokens=self.max_tokens,
                )
            if keep == 0 and words:
                raise InputTooLong(
                    f"item {index}: the relation types leave no room for the text in the model's "
                    f"{self.max_tokens} tokens",
                    index=index,
                    max_tokens=self.max_tokens,
                )
        read_end = words[keep - 1][2] if keep < len(words) else len(text)
        read = words[:keep]
        ner: list[list[Any]] = []
        names: dict[tuple[int, int], str] = {}
        for entity in entities:
            start, end = entity["start"], entity["end"]
            # An entity past the words read takes no part (trailing spaces past the cut do not count).
            if end > read_end and (start >= read_end or text[read_end:end].strip()):
                continue
            covered = [i for i, (_, ws, we) in enumerate(read) if we > start and ws < end]
            first, last = covered[0], covered[-1]
            ner.append([first, last, entity["label"], entity["text"]])
            names.setdefault((first, last + 1), entity["text"].strip())
        item = GlirelItem([w for w, _, _ in read], ner, names, [_echo(e) for e in entities])
        return item, prompt + specials + markers + used


def _top_k(value: Any, error: type[Exception]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(
            f"Option 'top_k' must be an integer (relations kept per entity pair; 0 or less keeps all), not {value!r}."
        )
    return value


def _entities(index: int, metadata: Mapping[str, Any] | None, text: str) -> list[dict[str, Any]]:
    """An item's ``metadata.entities``, checked: 400 naming the item and what is wrong."""
    where = f"item {index}"
    entities = (metadata or {}).get("entities") if isinstance(metadata, Mapping) else None
    if entities is None or entities == []:
        raise InvalidInput(
            f"{where}: GLiREL needs the item's entities in metadata.entities as [{{text, label, start, end}}]."
        )
    if not isinstance(entities, list):
        raise InvalidInput(f"{where}: metadata.entities must be a list of {{text, label, start, end}} objects.")
    if len(entities) > MAX_ENTITIES:
        raise InvalidInput(f"{where}: GLiREL items may carry at most {MAX_ENTITIES} entities; got {len(entities)}.")
    checked = []
    for number, entity in enumerate(entities):
        at = f"{where}: metadata.entities[{number}]"
        if not isinstance(entity, Mapping):
            raise InvalidInput(f"{at} must be an object {{text, label, start, end}}.")
        start, end = entity.get("start"), entity.get("end")
        if (
            not isinstance(start, int)
            or isinstance(start, bool)
            or not isinstance(end, int)
            or isinstance(end, bool)
            or not 0 <= start < end <= len(text)
        ):
            raise InvalidInput(
                f"{at}: start and end must be integer character offsets with 0 <= start < end <= {len(text)} "
                "(the text's length)."
            )
        if not text[start:end].strip():
            raise InvalidInput(f"{at}: the span [{start}, {end}) covers no word of the text.")
        label, name = entity.get("label", ""), entity.get("text", "")
        if not isinstance(label, str) or not isinstance(name, str):
            raise InvalidInput(f"{at}: text and label must be strings.")
        score = entity.get("score", 1.0)
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise InvalidInput(f"{at}: score must be a number.")
        checked.append({"text": name, "label": label, "score": float(score), "start": start, "end": end})
    return checked


def _echo(entity: Mapping[str, Any]) -> dict[str, Any]:
    return {**entity, "bbox": None}
