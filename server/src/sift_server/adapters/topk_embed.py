"""TopK-Embed (``topk-io/topk-embed-v1-xsmall`` / ``-small``): late-interaction vectors for
text queries and for text or page-image documents, as the reference server's
``topk_embed`` adapter makes them, on transformers' own ``Qwen3_5Model``.

The released folders carry sentence-transformers 6 repository code (``auto_map``); the
reference does not run it, and neither does Sift: it reads the folder's ``config.json``
(transformers' ``qwen3_5`` keys plus TopK's own), the backbone's weights (``model.*``),
the projection ``head.weight``, ``sentence_bert_config.json`` and the processor's files.

- The backbone's full-attention layers attend both ways (``is_causal`` false); the
  gated-delta-rule layers stay causal recurrences, so rows are padded on the right.
- Rotary tables (text and vision) use the checkpoint's bfloat16-rounded inverse
  frequencies, as it was trained.
- A query is ``query_template`` + the stripped text, capped at ``query_length`` tokens;
  every token yields a vector. A text document is ``document_prompt`` + the text,
  stripped (an empty one becomes the tokenizer's end-of-sequence token), capped at
  ``document_length``; the tokens of ``scoring_skip_ids`` yield none.
- A page image is the chat template around one image placeholder, expanded to the
  image's merged patches (Qwen2-VL's ``smart_resize`` within the processor's minimum and
  ``image_token_budget`` merged patches); only the image tokens yield vectors. An item
  with several images gets their vectors one after the other; its text is not read.
  Queries are text only.
- A vector is the head's projection, cut to ``output_dim`` (or the entry's
  ``token_dim``), then L2-normalised (``normalize``, default true).
- ``score``: MaxSim of the query's vectors over each candidate's.

Resizing: the reference resizes a page with torchvision (bicubic, antialiased), which does
not load beside this project's CPU PyTorch; Sift resizes with Pillow's bicubic filter. Pages
at a size the rules keep give the reference's vectors (the parity tests); a resized page's
differ slightly (docs/models.md, "TopK-Embed").
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._multivector import joined_per_item, maxsim
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    EncodeTask,
    LoadContext,
    Part,
    Prepared,
    ScoreTask,
    TaskInput,
)
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

ADAPTER = "topk-embed"
# TopK's keys in config.json (not Qwen3_5Config's), and the repository-code keys dropped.
_TOPK_KEYS = ("dim", "output_dim", "normalize", "query_template", "document_prompt", "image_token_budget",
              "scoring_skip_ids")  # fmt: skip
_REMOTE_KEYS = ("architectures", "auto_map", "model_type", "transformers_version")
_IMAGE_MESSAGE = [{"role": "user", "content": [{"type": "image"}]}]
# The reference's defaults where a folder leaves them out.
DEFAULT_QUERY_LENGTH = 1024
DEFAULT_DOCUMENT_LENGTH = 8192
DEFAULT_IMAGE_TOKEN_BUDGET = 1280
_MAX_ASPECT = 200


@dataclass(frozen=True, slots=True)
class Row:
    """One sequence: its token ids, which of them yield vectors, and for a page its
    normalised patches ``(patches, features)`` and grid ``(1, h, w)`` in patches."""

    ids: list[int]
    keep: np.ndarray
    pixels: np.ndarray | None = None
    grid: tuple[int, int, int] | None = None


Rows = tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class EncodePayload:
    items: list[Rows]
    normalize: bool


@dataclass(frozen=True, slots=True)
class ScorePayload:
    query: Row
    documents: list[Rows]
    normalize: bool


def smart_resize(height: int, width: int, *, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's rule: both sides a multiple of ``factor``, the area within the bounds."""
    if max(height, width) / min(height, width) > _MAX_ASPECT:
        raise InvalidInput(f"an image's aspect ratio must be under {_MAX_ASPECT}, not {width} × {height}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _split_config(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Qwen3_5Config's keys, TopK's keys) of the folder's config.json; refuses other layouts."""
    raw = _read_json(folder / "config.json")
    if not raw:
        raise UnservableModel("the folder has no config.json")
    if not any(key in raw for key in _TOPK_KEYS if key != "normalize"):
        raise UnservableModel(
            "the topk-embed adapter serves TopK-Embed folders (config.json with TopK's keys, such as "
            "query_template and scoring_skip_ids, beside the qwen3_5 keys); this folder has none"
        )
    text_type = (raw.get("text_config") or {}).get("model_type", "qwen3_5_text")
    if text_type != "qwen3_5_text":
        raise UnservableModel(f"the topk-embed adapter serves a qwen3_5 backbone, not {text_type!r}")
    topk = {key: raw.pop(key) for key in _TOPK_KEYS if key in raw}
    for key in _REMOTE_KEYS:
        raw.pop(key, None)
    return raw, topk


def _load_head(folder: Path) -> Any:
    import torch
    from safetensors import safe_open

    shard = "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shard = _read_json(index)["weight_map"].get("head.weight", shard)
    with safe_open(str(folder / shard), framework="pt") as handle:
        if "head.weight" not in handle.keys():  # noqa: SIM118 (safe_open has no __contains__)
            raise UnservableModel("the checkpoint has no head.weight (TopK-Embed's projection)")
        weight = handle.get_tensor("head.weight").to(torch.float32)
    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    head.load_state_dict({"weight": weight})
    return head.eval()


def _round_inv_freq(model: Any) -> None:
    """Every rotary table's inverse frequencies rounded to bfloat16, as the checkpoints were trained."""
    import torch

    for module in model.modules():
        inv_freq = getattr(module, "inv_freq", None)
        if isinstance(inv_freq, torch.Tensor) and inv_freq.is_floating_point():
            module.inv_freq = inv_freq.to(torch.bfloat16).to(torch.float32)
        original = getattr(module, "original_inv_freq", None)
        if isinstance(original, torch.Tensor) and original.is_floating_point():
            module.original_inv_freq = original.to(torch.bfloat16).to(torch.float32)


class TopkEmbedAdapter(Adapter):
    def __init__(
        self,
        model: Any,
        head: Any,
        tokenizer: Any,
        *,
        device: torch.device,
        topk: dict[str, Any],
        query_length: int,
        document_length: int,
        token_dim: int,
        normalize: bool,
        image: dict[str, Any],
    ) -> None:
        self.model = model
        self.head = head
        self.tokenizer = tokenizer
        self.device = device
        self.normalize = normalize
        self.token_dim = token_dim
        self.query_template = str(topk.get("query_template", "Query: "))
        self.document_prompt = str(topk.get("document_prompt", "Document: "))
        self.skip_ids = np.array(sorted(int(i) for i in topk.get("scoring_skip_ids") or []), dtype=np.int64)
        self.query_length = query_length
        self.document_length = document_length
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.image_token_id = int(model.config.image_token_id)
        self.image_prefix: list[int] = image["prefix"]
        self.image_suffix: list[int] = image["suffix"]
        self.patch = int(image["patch"])
        self.merge = int(image["merge"])
        self.temporal = int(image["temporal"])
        self.min_pixels = int(image["min_pixels"])
        self.max_pixels = int(image["max_pixels"])
        self.pixel_scale = np.float32(image["scale"])
        self.pixel_bias = np.float32(image["bias"])
        self._lock = threading.Lock()
        self.info = AdapterInfo(
            tasks=frozenset({"encode", "score"}),
            inputs=("text", "image"),
            outputs=("multivector",),
            dims={"multivector": token_dim},
            max_sequence_length=document_length,
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> TopkEmbedAdapter:
        import torch
        from transformers import AutoTokenizer, Qwen2VLImageProcessorPil
        from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5Model

        if ctx.backend not in ("auto", "torch"):
            raise ValueError(f"{ADAPTER} runs on PyTorch only, not {ctx.backend!r}")
        raw, topk = _split_config(ctx.path)
        config = Qwen3_5Config(**raw)
        config.text_config.is_causal = False
        config.text_config.use_cache = False
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        try:
            model, loading = Qwen3_5Model.from_pretrained(
                ctx.path,
                config=config,
                dtype=torch.float32,
                attn_implementation="sdpa",
                local_files_only=True,
                output_loading_info=True,
            )
        except RuntimeError as exc:  # transformers refuses weights of another shape itself
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnservableModel(f"the checkpoint does not match Qwen3_5Model: {first}") from exc
        unexpected = set(loading.get("unexpected_keys", [])) - {"head.weight"}
        if loading.get("missing_keys") or loading.get("mismatched_keys") or unexpected:
            raise UnservableModel(
                "the checkpoint does not match Qwen3_5Model: "
                f"missing {sorted(loading.get('missing_keys') or [])[:5]}, "
                f"mismatched {list(loading.get('mismatched_keys') or [])[:5]}, unexpected {sorted(unexpected)[:5]}"
            )
        # A row without padding gets no mask, and sdpa then reads the module's own flag.
        for layer in model.language_model.layers:
            if hasattr(layer, "self_attn"):
                layer.self_attn.is_causal = False
        _round_inv_freq(model)
        model.to(device).eval()
        head = _load_head(ctx.path).to(device)
        width = int(head.out_features)
        token_dim = int(ctx.options.get("token_dim") or topk.get("output_dim") or width)
        if not 0 < token_dim <= width:
            raise ValueError(f"{ADAPTER}: token_dim must be within 1..{width}, not {token_dim}")

        st = _read_json(ctx.path / "sentence_bert_config.json")
        text_cap = int(config.text_config.max_position_embeddings)
        query_length = min(int(ctx.options.get("query_max_length") or st.get("query_length", DEFAULT_QUERY_LENGTH)),
                           text_cap)  # fmt: skip
        document_length = int(st.get("document_length", DEFAULT_DOCUMENT_LENGTH))
        if ctx.max_sequence_length:
            document_length = min(document_length, int(ctx.max_sequence_length))
        document_length = min(document_length, text_cap)

        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        tokenizer.padding_side = "right"
        processor = Qwen2VLImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        template_file = ctx.path / "chat_template.jinja"
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else None
        prompt = tokenizer.apply_chat_template(
            _IMAGE_MESSAGE, chat_template=template, tokenize=False, add_generation_prompt=False
        )
        ids = [int(i) for i in tokenizer(prompt)["input_ids"]]
        image_token_id = int(config.image_token_id)
        if ids.count(image_token_id) != 1:
            raise UnservableModel("the chat template does not render one image placeholder for an image")
        split = ids.index(image_token_id)
        budget = int(
            ctx.options.get("image_token_budget") or topk.get("image_token_budget", DEFAULT_IMAGE_TOKEN_BUDGET)
        )
        patch, merge = int(processor.patch_size), int(processor.merge_size)
        mean, std = list(processor.image_mean), list(processor.image_std)
        if len(set(mean)) != 1 or len(set(std)) != 1:
            raise UnservableModel("the image processor normalises channels differently; TopK-Embed's do not")
        image = {
            "prefix": ids[:split],
            "suffix": ids[split + 1 :],
            "patch": patch,
            "merge": merge,
            "temporal": int(processor.temporal_patch_size),
            "min_pixels": int(processor.size["shortest_edge"]),
            "max_pixels": budget * (patch * merge) ** 2,
            "scale": float(processor.rescale_factor) / float(std[0]),
            "bias": -float(mean[0]) / float(std[0]),
        }
        return cls(
            model,
            head,
            tokenizer,
            device=device,
            topk=topk,
            query_length=query_length,
            document_length=document_length,
            token_dim=token_dim,
            normalize=bool(ctx.options.get("normalize", True)),
            image=image,
        )

    # ---- prepare (event loop, or the prep thread for images) ------------

    def _tokens(self, text: str) -> list[int]:
        with self._lock:
            return [int(i) for i in self.tokenizer(text)["input_ids"]]

    def _capped(self, ids: list[int], cap: int, index: int, overflow: str) -> list[int]:
        if len(ids) <= cap:
            return ids
        if overflow == "error":
            raise InputTooLong(
                f"item {index}: {len(ids)} tokens with the prompt; this model takes at most {cap} "
                "(use overflow_policy 'truncate' to cut it)",
                index=index,
                tokens=len(ids),
                max_tokens=cap,
            )
        return ids[:cap]

    def _query(self, text: str, index: int, overflow: str) -> Row:
        ids = self._capped(self._tokens(self.query_template + text.strip()), self.query_length, index, overflow)
        return Row(ids, np.ones(len(ids), dtype=bool))

    def _document(self, text: str, index: int, overflow: str) -> Row:
        payload = (self.document_prompt + text).strip() or (self.tokenizer.eos_token or ".")
        ids = self._capped(self._tokens(payload), self.document_length, index, overflow)
        return Row(ids, ~np.isin(np.asarray(ids, dtype=np.int64), self.skip_ids))

    def _page(self, image: Image) -> Row:
        from PIL import Image as PILImage

        rgb = image.convert("RGB")
        width, height = rgb.size
        factor = self.patch * self.merge
        new_h, new_w = smart_resize(
            height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        if (new_h, new_w) != (height, width):
            rgb = rgb.resize((new_w, new_h), PILImage.Resampling.BICUBIC)
        pixels = np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)  # (3, h, w)
        grid = (1, new_h // self.patch, new_w // self.patch)
        count = grid[1] * grid[2] // self.merge**2
        ids = [*self.image_prefix, *([self.image_token_id] * count), *self.image_suffix]
        keep = np.asarray(ids, dtype=np.int64) == self.image_token_id
        return Row(ids, keep, self._patches(pixels), grid)

    def _patches(self, pixels: np.ndarray) -> np.ndarray:
        """``(3, h, w)`` uint8 to normalised patches ``(h/p · w/p, 3 · t · p · p)``, in the
        order the vision tower merges them (each 2 × 2 block of patches together)."""
        p, m, t = self.patch, self.merge, self.temporal
        channels, height, width = pixels.shape
        gh, gw = height // p, width // p
        frames = np.broadcast_to(pixels[None], (t, channels, height, width))
        blocks = frames.reshape(t, channels, gh // m, m, p, gw // m, m, p)
        flat = blocks.transpose(2, 5, 3, 6, 1, 0, 4, 7).reshape(gh * gw, channels * t * p * p)
        out: np.ndarray = flat.astype(np.float32) * self.pixel_scale + self.pixel_bias
        return out

    def _item(self, text: str, images: Sequence[Image], index: int, *, is_query: bool, overflow: str) -> Rows:
        if images:
            if is_query:
                raise InvalidInput(f"item {index}: TopK-Embed queries are text; images are encoded as documents")
            return tuple(self._page(image) for image in images)
        return (self._query(text, index, overflow) if is_query else self._document(text, index, overflow),)

    def _normalize(self, options: Mapping[str, Any]) -> bool:
        value = options.get("normalize", self.normalize)
        if not isinstance(value, bool):
            raise InvalidInput(f"Option 'normalize' must be true or false, not {value!r}.")
        return value

    def prepare(self, task: TaskInput) -> Prepared:
        if isinstance(task, EncodeTask | ScoreTask) and task.instruction:
            raise InvalidInput(
                "TopK-Embed applies its own 'Query: ' and 'Document: ' templates; instructions are not supported"
            )
        if isinstance(task, EncodeTask):
            normalize = self._normalize(task.options)
            items = [
                self._item(
                    text,
                    task.images[index] if task.images else (),
                    index,
                    is_query=task.is_query,
                    overflow=task.overflow,
                )
                for index, text in enumerate(task.texts)
            ]
            costs = [sum(len(row.ids) for row in rows) for rows in items]
            payload = EncodePayload(items, normalize)
            return Prepared(costs, (ADAPTER, "encode"), payload, input_tokens=_text_tokens(items))
        if isinstance(task, ScoreTask):
            if not task.texts:
                raise InvalidInput("score needs at least one item")
            normalize = self._normalize(task.options)
            query = self._query(task.query, 0, task.overflow)
            documents = [
                self._item(
                    text, task.images[index] if task.images else (), index, is_query=False, overflow=task.overflow
                )
                for index, text in enumerate(task.texts)
            ]
            costs = [sum(len(row.ids) for row in rows) for rows in documents]
            costs[0] += len(query.ids)  # the query runs with the part that holds the first item
            input_tokens = _text_tokens(documents) + len(query.ids)
            scored = ScorePayload(query, documents, normalize)
            return Prepared(costs, (ADAPTER, "score"), scored, input_tokens=input_tokens)
        raise InvalidInput("This model supports encode and score.")

    # ---- forward (executor thread) --------------------------------------

    def _positions(self, rows: Sequence[Row], width: int) -> torch.Tensor:
        """Qwen's 3-D rotary positions: the image's tokens at (start, start + row, start + column)
        of its merged grid, the text before it counting from 0, the text after it resuming at
        start + the grid's longer side."""
        import torch

        positions = torch.zeros((3, len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            assert row.grid is not None
            gh, gw = row.grid[1] // self.merge, row.grid[2] // self.merge
            start, count = len(self.image_prefix), gh * gw
            n = len(row.ids)
            within = torch.arange(n)
            j = within - start
            image = (within >= start) & (within < start + count)
            after = within + torch.where(within >= start + count, max(gh, gw) - count, 0)
            positions[0, i, :n] = torch.where(image, torch.full_like(within, start), after)
            positions[1, i, :n] = torch.where(image, start + torch.div(j, gw, rounding_mode="floor"), after)
            positions[2, i, :n] = torch.where(image, start + j % gw, after)
        return positions

    def _run(self, rows: Sequence[Row]) -> list[torch.Tensor]:
        """Each row's kept vectors; the rows padded on the right into one forward."""
        import torch

        width = max(len(row.ids) for row in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row.ids)] = row.ids
            mask[i, : len(row.ids)] = 1
        input_ids = torch.from_numpy(ids).to(self.device)
        attention_mask = torch.from_numpy(mask).to(self.device)
        with torch.inference_mode():
            embeds = self.model.get_input_embeddings()(input_ids)
            positions = None
            if rows[0].pixels is not None:
                pixels = torch.from_numpy(np.concatenate([row.pixels for row in rows if row.pixels is not None]))
                grids = torch.tensor([row.grid for row in rows], dtype=torch.long)
                features = self.model.visual(pixels.to(self.device), grid_thw=grids.to(self.device))
                merged = features.pooler_output if hasattr(features, "pooler_output") else features
                if isinstance(merged, list | tuple):
                    merged = torch.cat(list(merged))
                embeds[input_ids == self.image_token_id] = merged.to(embeds.dtype)
                positions = self._positions(rows, width).to(self.device)
            hidden = self.model.language_model(
                inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions, use_cache=False
            ).last_hidden_state
            vectors = self.head(hidden).float()[..., : self.token_dim]
            return [vectors[i, : len(row.ids)][torch.from_numpy(row.keep)] for i, row in enumerate(rows)]

    def _embed(self, rows: Sequence[Row]) -> list[torch.Tensor]:
        """Each row's kept vectors, before normalisation: pages and texts as two forwards."""
        out: list[torch.Tensor | None] = [None] * len(rows)
        for with_pixels in (True, False):
            chosen = [i for i, row in enumerate(rows) if (row.pixels is not None) == with_pixels]
            if chosen:
                for i, vectors in zip(chosen, self._run([rows[i] for i in chosen]), strict=True):
                    out[i] = vectors
        return [v for v in out if v is not None]

    def _items(self, items: Sequence[Rows]) -> list[torch.Tensor]:
        return joined_per_item(self._embed([row for rows in items for row in rows]), [len(rows) for rows in items])

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        if isinstance(parts[0].prepared.payload, ScorePayload):
            return self._score(parts)
        payloads: list[EncodePayload] = [part.prepared.payload for part in parts]
        items = [rows for part, p in zip(parts, payloads, strict=True) for rows in p.items[part.start : part.stop]]
        flags = [p.normalize for part, p in zip(parts, payloads, strict=True) for _ in range(part.start, part.stop)]
        vectors = [_normalized(v, flag).cpu().numpy() for v, flag in zip(self._items(items), flags, strict=True)]
        return split_by_parts([{"multivector": v} for v in vectors], parts)

    def _score(self, parts: Sequence[Part]) -> list[list[Any]]:
        payloads: list[ScorePayload] = [part.prepared.payload for part in parts]
        queries = [_normalized(q, p.normalize) for q, p in zip(self._embed([p.query for p in payloads]), payloads,
                                                                strict=True)]  # fmt: skip
        documents = self._items(
            [
                rows
                for part, payload in zip(parts, payloads, strict=True)
                for rows in payload.documents[part.start : part.stop]
            ]
        )
        per_part = split_by_parts(documents, parts)
        return [
            [maxsim(query, _normalized(d, payload.normalize)) for d in docs]
            for query, docs, payload in zip(queries, per_part, payloads, strict=True)
        ]

    def memory_bytes(self) -> int:
        return module_bytes(self.model) + module_bytes(self.head)

    def close(self) -> None:
        release_module(self.model, self.device)


def _normalized(vectors: torch.Tensor, normalize: bool) -> torch.Tensor:
    import torch

    return torch.nn.functional.normalize(vectors, p=2, dim=-1) if normalize else vectors


def _text_tokens(items: Sequence[Rows]) -> int:
    """Tokens of the items read as text (a page counts none)."""
    return sum(len(rows[0].ids) for rows in items if rows[0].pixels is None)
