"""Images of encode items: limits checked on the event loop, decoding off it.

``check_images`` is cheap (counts, byte sizes, declared formats) and runs where
the request is validated. ``decode_images`` runs in the prep thread: it reads
each image's header first and refuses one with too many pixels before a single
pixel is decoded (a small file can declare a huge canvas: a decompression bomb),
then decodes it fully (truncated data fails here, not in a forward).

Pixels follow the reference server, so that vectors from either server can
query an index built by the other (docs/models.md, "Images"): the image is
converted to RGB as Pillow does it, which drops an alpha channel rather than
compositing it on a background, and the EXIF orientation is not applied.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sift_server.errors import InvalidInput
from sift_server.wire.schemas import ImageInput, Item

if TYPE_CHECKING:
    from PIL.Image import Image

# The formats the released SDK sends, and the Pillow format names each may decode as.
FORMATS: dict[str, frozenset[str]] = {
    "jpeg": frozenset({"JPEG", "MPO"}),
    "png": frozenset({"PNG"}),
    "gif": frozenset({"GIF"}),
    "webp": frozenset({"WEBP"}),
    "bmp": frozenset({"BMP", "DIB"}),
    "tiff": frozenset({"TIFF"}),
}
# Spellings the SDK normalises to jpeg.
_ALIASES = {"jpg": "jpeg", "jpe": "jpeg"}
_PILLOW_FORMATS = frozenset().union(*FORMATS.values())


@dataclass(frozen=True, slots=True)
class ImageLimits:
    per_item: int = 16
    per_request: int = 256
    # Encoded bytes of one image.
    max_bytes: int = 16 * 1024 * 1024
    # Decoded width × height of one image (a 8,000 × 5,000 photo is 40 million).
    max_pixels: int = 50_000_000


@dataclass(frozen=True, slots=True)
class RawImage:
    """An image as received, checked for size and declared format; ``where``
    names it in errors (``items[2].images[0]``)."""

    data: bytes
    format: str | None
    where: str


def declared_format(value: str | None, where: str) -> str | None:
    if value is None:
        return None
    name = value.lower()
    name = _ALIASES.get(name, name)
    if name not in FORMATS:
        raise InvalidInput(f"{where}: unsupported image format {value!r}; expected one of {', '.join(FORMATS)}.")
    return name


def _check_one(image: ImageInput, where: str, limits: ImageLimits) -> RawImage:
    if not image.data:
        raise InvalidInput(f"{where}: the image data is empty.")
    if len(image.data) > limits.max_bytes:
        raise InvalidInput(f"{where}: the image is {len(image.data)} bytes; the limit is {limits.max_bytes} bytes.")
    return RawImage(image.data, declared_format(image.format, where), where)


def check_images(items: Sequence[Item], limits: ImageLimits, field: str = "items") -> list[tuple[RawImage, ...]]:
    """Per item, its images checked against the limits (an empty tuple for a text item)."""
    total = sum(len(item.images or ()) for item in items)
    if total > limits.per_request:
        raise InvalidInput(
            f"The request has {total} images; this server accepts at most {limits.per_request} per request."
        )
    out: list[tuple[RawImage, ...]] = []
    for index, item in enumerate(items):
        images = item.images or []
        if len(images) > limits.per_item:
            raise InvalidInput(
                f"{field}[{index}] has {len(images)} images; this server accepts at most {limits.per_item} per item."
            )
        out.append(tuple(_check_one(image, f"{field}[{index}].images[{n}]", limits) for n, image in enumerate(images)))
    return out


def decode_image(raw: RawImage, max_pixels: int) -> Image:
    """The image as RGB pixels (alpha dropped, EXIF orientation ignored, as the reference does)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow's own bomb guard warns, then raises at twice its limit; ours is checked below.
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(raw.data))
    except PILImage.DecompressionBombError:
        raise InvalidInput(f"{raw.where}: the image has too many pixels; the limit is {max_pixels}.") from None
    except UnidentifiedImageError:
        raise InvalidInput(f"{raw.where}: the data is not an image in a known format.") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise InvalidInput(f"{raw.where}: the data is not a decodable image ({_reason(exc)}).") from None
    if image.format not in _PILLOW_FORMATS:
        raise InvalidInput(f"{raw.where}: the data is a {image.format} image; expected one of {', '.join(FORMATS)}.")
    width, height = image.size
    if width * height > max_pixels:
        raise InvalidInput(
            f"{raw.where}: the image is {width} × {height} = {width * height} pixels; the limit is {max_pixels}."
        )
    if raw.format is not None and image.format not in FORMATS[raw.format]:
        raise InvalidInput(f"{raw.where}: the image is declared {raw.format!r} but its data is {image.format}.")
    try:
        image.load()
    except (OSError, ValueError, SyntaxError) as exc:
        raise InvalidInput(f"{raw.where}: the image data is truncated or corrupt ({_reason(exc)}).") from None
    return image if image.mode == "RGB" else image.convert("RGB")


def _reason(exc: BaseException) -> str:
    return str(exc).split("\n", 1)[0][:200] or type(exc).__name__


def decode_images(raws: Sequence[Sequence[RawImage]], max_pixels: int) -> list[tuple[Image, ...]]:
    """Every item's images decoded (runs in the prep thread)."""
    return [tuple(decode_image(raw, max_pixels) for raw in item) for item in raws]
