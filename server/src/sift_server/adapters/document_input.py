"""A document of an extract item as the service hands it to a document adapter:
checked against the limits, its format known from its bytes, its pages counted.
No library is imported here; the service layer and the adapters share it."""

from __future__ import annotations

from dataclasses import dataclass

# Formats docling converts with its own parsers, no weights at all.
WEIGHT_FREE_FORMATS = frozenset({"docx", "pptx", "xlsx", "html", "md", "csv"})
# Formats that go through docling's layout model (and OCR when asked): they need its weights.
LAYOUT_FORMATS = frozenset({"pdf", "image"})


@dataclass(frozen=True, slots=True)
class Document:
    """``format`` is the canonical name (``pdf``, ``docx``, ``pptx``, ``xlsx``, ``html``,
    ``md``, ``csv`` or ``image``); ``pages`` what the document costs a worker slot (at
    least 1); ``where`` names it in errors (``items[2].document``)."""

    data: bytes
    format: str
    pages: int
    where: str
