"""What the tests of the document-image retrievers share (the `colpali` adapter's ColPali and
ColQwen2, the `colpali-engine` adapter's ColQwen2.5 and colSmol): the parity pages as the
service decodes them, a case's encode and score tasks over those pages, one forward of several
tasks, and multivectors compared with the recorded ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sift_server.adapters.base import Adapter, EncodeTask, Part, ScoreTask, TaskInput


def decode_pages(data: Sequence[bytes]) -> list[Any]:
    """PNG pages as the service decodes them (service/images.py)."""
    from sift_server.service.images import RawImage, decode_image

    return [decode_image(RawImage(raw, "png", f"image {i}"), 50_000_000) for i, raw in enumerate(data)]


def _texts_and_images(items: list[dict[str, Any]], pages: Sequence[Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    return [item.get("text", "") for item in items], [tuple(pages[i] for i in item.get("images", [])) for item in items]


def pages_encode_task(case: dict[str, Any], pages: Sequence[Any], **options: Any) -> EncodeTask:
    """The task service/encode builds from the case's request (its images index ``pages``)."""
    texts, images = _texts_and_images(case["items"], pages)
    return EncodeTask(texts=texts, images=images, is_query=case["is_query"], options=options)


def pages_score_task(case: dict[str, Any], pages: Sequence[Any]) -> ScoreTask:
    texts, images = _texts_and_images(case["items"], pages)
    return ScoreTask(query=case["query"], texts=texts, images=images)


def run(adapter: Adapter, *tasks: TaskInput) -> list[list[Any]]:
    """The tasks prepared and answered in one forward."""
    prepared = [adapter.prepare(task) for task in tasks]
    return adapter.forward([Part(p, 0, len(p.item_costs)) for p in prepared])


def assert_close_vectors(got: list[np.ndarray], expected: list[Any], tol: float) -> None:
    assert len(got) == len(expected)
    for vectors, want in zip(got, expected, strict=True):
        assert np.asarray(vectors).shape == np.asarray(want).shape
        np.testing.assert_allclose(vectors, want, atol=tol, rtol=0)
