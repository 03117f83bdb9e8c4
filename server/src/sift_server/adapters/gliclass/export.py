"""The forward GLiClass's exported graph runs: the encoder's last layer only where
the head reads it.

A uni-encoder GLiClass with first-token pooling reads the encoder's output at a
few positions only: each label's class token and the text's first token (the
sequence's first, or the text marker's). Every other position's last-layer
output is computed and thrown away. In a BERT layer, position ``p``'s output
depends on every position's keys and values but only on ``p``'s own query,
attention output and feed-forward. :class:`PrunedForward` therefore runs the
encoder's layers but the last as the library does, then the last layer's keys
and values for every position and its query, attention output and feed-forward
for the read positions only (about four fifths of that layer's multiply-adds on
a rendered text of 30-40 tokens), and hands the library's own head a tensor with
those rows in place. Same weights, same function: the answers differ from
PyTorch's by float rounding only, which ``auto``'s probe and the parity tests
check like any export.

:func:`prunable` says which models qualify; the others export the library's
forward unchanged. The PyTorch model that serves ``torch`` is never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

# Part of the exported graph's cache key: a graph exported before (or without) the
# pruning is not reused.
VERSION = "last-layer-at-read-positions-1"

# Heads that read only the pooled text vector and the class vectors.
_SCORERS = frozenset({"simple", "weighted-dot", "mlp", "hopfield"})


def prunable(config: Any, token_inputs: Sequence[str]) -> bool:
    """Whether the GLiClass of ``config`` (its GLiClassModelConfig) reads its
    encoder's output at the class tokens and one text position only, on a BERT
    encoder whose layers are plain self-attention layers."""
    encoder = config.encoder_config
    return (
        config.architecture_type == "uni-encoder"
        and not getattr(config, "use_calibrator", False)
        and config.pooling_strategy == "first"
        and getattr(config, "class_token_pooling", "first") == "first"
        and config.scorer_type in _SCORERS
        and not config.use_lstm
        and not config.squeeze_layers
        and not config.layer_wise
        and config.encoder_layer_id == -1
        and not getattr(config, "use_segment_embeddings", False)
        and getattr(encoder, "model_type", None) == "bert"
        and getattr(encoder, "position_embedding_type", "absolute") == "absolute"
        and not getattr(encoder, "is_decoder", False)
        and not getattr(encoder, "add_cross_attention", False)
        and {"input_ids", "attention_mask"} <= set(token_inputs)
    )


def read_positions(input_ids: torch.Tensor, config: Any, slots: int) -> torch.Tensor:
    """[batch, 1 + slots]: the text's pooled position, then the position of each
    label slot's class token (the token after it when ``embed_class_token`` is off),
    as the library's ``_extract_class_features_first`` and pooling select them.
    Slots without a label point at position 0, whose row is computed anyway."""
    marks = input_ids == config.class_token_index
    order = marks.long().cumsum(dim=-1) - 1
    slot = torch.arange(slots, device=input_ids.device).view(1, -1, 1)
    chosen = marks.unsqueeze(1) & (order.unsqueeze(1) == slot)  # [batch, slots, seq]
    classes = chosen.int().argmax(dim=-1)
    if not config.embed_class_token:
        present = chosen.any(dim=-1)
        # The library drops a class token in the last position (nothing follows it).
        after = (classes + 1).clamp(max=input_ids.shape[1] - 1)
        classes = torch.where(present, after, torch.zeros_like(classes))
    if config.extract_text_features:
        text = (input_ids == config.text_token_index).int().argmax(dim=-1, keepdim=True)
    else:
        text = torch.zeros_like(classes[:, :1])
    return torch.cat([text, classes], dim=1)


class PrunedLastLayer(nn.Module):
    """A BertLayer's forward for the rows at the read positions only (eval mode)."""

    def __init__(self, layer: Any) -> None:
        super().__init__()
        attention = layer.attention.self
        self.heads = int(attention.num_attention_heads)
        self.head_size = int(attention.attention_head_size)
        self.scaling = float(attention.attention_head_size) ** -0.5
        self.query: nn.Module = attention.query
        self.key: nn.Module = attention.key
        self.value: nn.Module = attention.value
        self.attention_output: nn.Module = layer.attention.output
        self.intermediate: nn.Module = layer.intermediate
        self.output: nn.Module = layer.output

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``index``: the read positions expanded over the hidden axis ([batch, rows, width])."""
        batch, length, _ = hidden.shape
        rows = torch.gather(hidden, 1, index)
        query = self.query(rows).view(batch, -1, self.heads, self.head_size).transpose(1, 2)
        key = self.key(hidden).view(batch, length, self.heads, self.head_size).transpose(1, 2)
        value = self.value(hidden).view(batch, length, self.heads, self.head_size).transpose(1, 2)
        blocked = (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        weights = torch.softmax(query @ key.transpose(-1, -2) * self.scaling + blocked, dim=-1)
        context = (weights @ value).transpose(1, 2).reshape(batch, -1, self.heads * self.head_size)
        attended = self.attention_output(context, rows)
        out: torch.Tensor = self.output(self.intermediate(attended), attended)
        return out


@contextmanager
def _without_last_layer(encoder: Any) -> Iterator[None]:
    layers = encoder.encoder.layer
    encoder.encoder.layer = nn.ModuleList(list(layers)[:-1])
    try:
        yield
    finally:
        encoder.encoder.layer = layers


class PrunedForward(nn.Module):
    """``classifier``'s logits from the token inputs and ``class_slots``
    (positionally), with the last encoder layer run at the read positions only."""

    def __init__(self, classifier: Any, token_inputs: Sequence[str]) -> None:
        super().__init__()
        self.classifier = classifier
        self.token_inputs = tuple(token_inputs)
        self.last = PrunedLastLayer(classifier.model.encoder_model.encoder.layer[-1])

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        named = dict(zip(self.token_inputs, tensors[:-1], strict=True))
        slots = tensors[-1].shape[1]
        uni = self.classifier.model
        with _without_last_layer(uni.encoder_model):
            hidden = uni.encoder_model(**named, return_dict=True).last_hidden_state
        input_ids, mask = named["input_ids"], named["attention_mask"]
        positions = read_positions(input_ids, uni.config, slots)
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        rows = self.last(hidden, mask, index)
        # Rows never read stay zero; repeated positions (slot 0's fill) carry equal rows.
        full = torch.zeros_like(hidden).scatter(1, index, rows)
        logits: torch.Tensor = uni.process_encoder_output(input_ids, mask, full, None, slots)[0]
        return logits
