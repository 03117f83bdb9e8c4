"""service/images.py: the checks on the loop and the pixel rules of decoding."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sift_server.errors import InvalidInput
from sift_server.service.images import ImageLimits, RawImage, check_images, declared_format, decode_image
from sift_server.wire.schemas import ImageInput, Item
from tests.fixtures.tiny_images import sample_images

if TYPE_CHECKING:
    from PIL.Image import Image


def _decode(name: str) -> Image:
    data, fmt = sample_images()[name]
    return decode_image(RawImage(data, fmt, name), 10**8)


def test_alpha_is_dropped_not_composited() -> None:
    from PIL import Image

    data, _ = sample_images()["rgba_png"]
    original = np.asarray(Image.open(io.BytesIO(data)))
    assert original.shape[2] == 4 and original[..., 3].min() < 255  # some pixels are transparent
    decoded = np.asarray(_decode("rgba_png"))
    np.testing.assert_array_equal(decoded, original[..., :3])


def test_exif_orientation_is_not_applied() -> None:
    from PIL import Image

    data, _ = sample_images()["exif_jpeg"]
    assert Image.open(io.BytesIO(data)).getexif()[0x0112] == 6  # "rotate 90°" is there
    image = _decode("exif_jpeg")
    assert image.size == (48, 24)  # as stored; a viewer shows 24 × 48


@pytest.mark.parametrize("name", ["gray_png", "palette_gif", "tiny_bmp", "rgb_jpeg"])
def test_every_mode_becomes_rgb(name: str) -> None:
    assert _decode(name).mode == "RGB"


def test_declared_formats_follow_the_sdk_spelling() -> None:
    assert declared_format("JPG", "x") == "jpeg"
    assert declared_format("jpe", "x") == "jpeg"
    assert declared_format("TIFF", "x") == "tiff"
    assert declared_format(None, "x") is None
    with pytest.raises(InvalidInput, match="unsupported image format 'heic'"):
        declared_format("heic", "x")


def test_an_undeclared_format_is_whatever_of_the_six_the_data_is() -> None:
    data, _ = sample_images()["palette_gif"]
    assert decode_image(RawImage(data, None, "x"), 10**8).size == (45, 29)


def test_limits_name_the_item_and_image() -> None:
    image = ImageInput(data=b"\x89PNG")
    items = [Item(text="a"), Item(images=[image, image, image])]
    with pytest.raises(InvalidInput, match=r"items\[1\] has 3 images; this server accepts at most 2 per item"):
        check_images(items, ImageLimits(per_item=2))
    with pytest.raises(InvalidInput, match=r"items\[1\].images\[0\]: the image is 4 bytes; the limit is 3 bytes"):
        check_images(items, ImageLimits(max_bytes=3))
    checked = check_images(items, ImageLimits())
    assert [len(images) for images in checked] == [0, 3]
    assert checked[1][2].where == "items[1].images[2]"
