"""Request bodies of the native routes as msgspec structs.

msgspec validates types in the same pass that decodes JSON or msgpack and
ignores unknown fields, as the contract requires.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ImageInput(msgspec.Struct, omit_defaults=True):
    """One image of an item: its encoded bytes (msgpack bin, JSON base64) and the
    format the client declares (jpeg, png, gif, webp, bmp, tiff; optional)."""

    data: bytes
    format: str | None = None


class DocumentInput(msgspec.Struct, omit_defaults=True):
    """A document of an item, as sie-sdk sends it: its bytes (msgpack bin, JSON base64)
    and a format hint (pdf, docx, html, md, ...; None or empty: none)."""

    data: bytes
    format: str | None = None


class Item(msgspec.Struct, omit_defaults=True):
    id: str | None = None
    text: str | None = None
    metadata: dict[str, Any] | None = None
    images: list[ImageInput] | None = None
    audio: Any | None = None
    video: Any | None = None
    document: DocumentInput | None = None


class EncodeParams(msgspec.Struct, omit_defaults=True):
    output_types: list[str] | None = None
    instruction: str | None = None
    output_dtype: str | None = None
    options: dict[str, Any] | None = None


class EncodeBody(msgspec.Struct):
    items: list[Item] | None = None
    params: EncodeParams | None = None


class ScoreBody(msgspec.Struct):
    query: Item | None = None
    items: list[Item] | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractParams(msgspec.Struct, omit_defaults=True):
    labels: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractBody(msgspec.Struct):
    items: list[Item] | None = None
    params: ExtractParams | None = None
