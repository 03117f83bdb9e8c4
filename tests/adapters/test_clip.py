"""The clip adapter (CLIP and SigLIP) served in process on the tiny models, against
the reference server's answers recorded in tests/fixtures/image_parity.json
(scripts/record_image_parity.py re-records them), and its image rules."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import pytest

from sift_server.adapters.base import EncodeTask, Part
from sift_server.adapters.clip import ClipAdapter
from tests.adapters.conftest import load_context
from tests.fixtures.image_cases import BAD, GOOD, image_cases
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_images import TEXTS, TINY_CLIP, TINY_SIGLIP, build_tiny_clip, build_tiny_siglip, sample_images

if TYPE_CHECKING:
    import httpx

FIXTURE = Path(__file__).parents[1] / "fixtures" / "image_parity.json"
MODELS = (TINY_CLIP, TINY_SIGLIP)


@pytest.fixture(scope="module")
def image_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-models")
    return {TINY_CLIP: build_tiny_clip(root / "clip"), TINY_SIGLIP: build_tiny_siglip(root / "siglip")}


def catalog_text(name: str, folder: Path) -> str:
    return f"name: {name}\nadapter: clip\nbackend: torch\nsource:\n  path: {folder}\ntasks: [encode]\n"


@contextlib.asynccontextmanager
async def serving(folder: Path, entries: dict[str, str], **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    import httpx

    from sift_server.api.app import create_app
    from sift_server.composition import build_state
    from sift_server.config import Settings
    from sift_server.registry.catalog import Catalog

    catalog = folder / "catalog"
    catalog.mkdir(exist_ok=True)
    for index, text in enumerate(entries.values()):
        (catalog / f"entry{index}.yaml").write_text(text)
    config = Settings(
        default_model=next(iter(entries)),
        preload=list(entries),
        catalog=[catalog],
        torch_threads=1,
        calibrate=False,
        **settings,
    )
    app = create_app(build_state(config, catalog=Catalog.from_dirs([catalog], include_shipped=False)))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as client:
        yield client


def _wire_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A case's items with image bytes (msgpack bin)."""
    out = []
    for item in items:
        entry = {k: v for k, v in item.items() if k != "images"}
        if "images" in item:
            entry["images"] = [{"data": base64.b64decode(i["data"]), "format": i["format"]} for i in item["images"]]
        out.append(entry)
    return out


async def post_msgpack(client: httpx.AsyncClient, model: str, items: list[dict[str, Any]]) -> httpx.Response:
    body = msgpack.packb({"items": items, "params": {"output_types": ["dense"]}}, use_bin_type=True)
    return await client.post(
        f"/v1/encode/{model}",
        content=body,
        headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
    )


def dense(response: httpx.Response) -> list[np.ndarray]:
    body = msgpack.unpackb(response.content, raw=False)
    out = []
    for item in body["items"]:
        nd = item["dense"]["values"]
        out.append(np.frombuffer(nd[b"data"], dtype=np.dtype(nd[b"type"])).reshape(nd[b"shape"]))
    return out


def reference() -> dict[str, Any]:
    answers: dict[str, Any] = json.loads(FIXTURE.read_text())["answers"]
    return answers


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return reference()


async def test_vectors_equal_the_reference_servers(
    image_models: dict[str, Path], recorded: dict[str, Any], tmp_path: Path
) -> None:
    entries = {name: catalog_text(name, folder) for name, folder in image_models.items()}
    checked = refused = 0
    async with serving(tmp_path, entries) as client:
        for case in image_cases():
            want = recorded[case["name"]]
            response = await post_msgpack(client, case["model"], _wire_items(case["items"]))
            assert response.status_code == want["raw"]["status"], (case["name"], response.text)
            if response.status_code != 200:
                assert response.json()["detail"]["code"] == want["raw"]["code"]
                refused += 1
                continue
            got = dense(response)
            assert len(got) == len(want["dense"])
            for vector, expected in zip(got, want["dense"], strict=True):
                np.testing.assert_allclose(vector, np.array(expected), atol=1e-5, rtol=0)
            body = msgpack.unpackb(response.content, raw=False)
            assert body.get("usage") == want["raw"]["usage"], case["name"]
            checked += 1
    assert (checked, refused) == (len(GOOD) * len(MODELS), len(BAD) * len(MODELS))


async def test_json_base64_images_equal_msgpack_bytes(image_models: dict[str, Path], tmp_path: Path) -> None:
    case = next(c for c in image_cases() if c["name"] == f"{TINY_CLIP}:mixed")
    async with serving(tmp_path, {TINY_CLIP: catalog_text(TINY_CLIP, image_models[TINY_CLIP])}) as client:
        packed = dense(await post_msgpack(client, TINY_CLIP, _wire_items(case["items"])))
        response = await client.post(
            f"/v1/encode/{TINY_CLIP}", json={"items": case["items"]}, headers={"Accept": "application/json"}
        )
        assert response.status_code == 200, response.text
        as_json = [np.array(item["dense"]["values"]) for item in response.json()["items"]]
    for a, b in zip(packed, as_json, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-7)


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` × ``height`` and which has no pixels at all."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def _image_item(data: bytes, fmt: str | None) -> dict[str, Any]:
    image: dict[str, Any] = {"data": data}
    if fmt is not None:
        image["format"] = fmt
    return {"images": [image]}


async def test_bad_images_get_400_with_the_envelope_and_others_in_flight_succeed(
    image_models: dict[str, Path], tmp_path: Path
) -> None:
    png, _ = sample_images()["rgb_png"]
    jpeg, _ = sample_images()["rgb_jpeg"]
    bad = {
        "truncated": _image_item(png[: len(png) // 2], "png"),
        "not an image": _image_item(b"BM" + b"\0" * 40, "bmp"),
        "wrong declared format": _image_item(png, "jpeg"),
        "unknown format": _image_item(png, "svg"),
        "too many pixels": _image_item(_png_header(9_000, 9_000), "png"),
        "bomb past Pillow's own guard": _image_item(_png_header(100_000, 100_000), "png"),
        "empty data": _image_item(b"", "png"),
        "neither text nor image": {},
    }
    good = [{"images": [{"data": jpeg, "format": "jpeg"}]}, {"text": TEXTS[0]}]
    async with serving(tmp_path, {TINY_CLIP: catalog_text(TINY_CLIP, image_models[TINY_CLIP])}) as client:
        alone = dense(await post_msgpack(client, TINY_CLIP, good))
        calls = [post_msgpack(client, TINY_CLIP, [item]) for item in bad.values()]
        calls += [post_msgpack(client, TINY_CLIP, good) for _ in range(3)]
        responses = await asyncio.gather(*calls)
    messages = {}
    for name, response in zip(bad, responses, strict=False):
        assert response.status_code == 400, (name, response.text)
        messages[name] = response.json()["detail"]["message"]
        assert response.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
        detail = response.json()["detail"]
        assert detail["code"] == "INVALID_INPUT" and detail["message"], name
    assert "9000 × 9000 = 81000000 pixels" in messages["too many pixels"]
    assert "too many pixels" in messages["bomb past Pillow's own guard"]
    assert "declared 'jpeg' but its data is PNG" in messages["wrong declared format"]
    assert "truncated" in messages["truncated"]
    for response in responses[len(bad) :]:
        assert response.status_code == 200
        for a, b in zip(dense(response), alone, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)


async def test_image_limits_are_settings(image_models: dict[str, Path], tmp_path: Path) -> None:
    png, _ = sample_images()["rgb_png"]  # 53 × 37 = 1,961 pixels
    image = {"data": png, "format": "png"}
    entries = {TINY_CLIP: catalog_text(TINY_CLIP, image_models[TINY_CLIP])}
    limits = {
        "max_images_per_item": 2,
        "max_images_per_request": 3,
        "max_image_pixels": 1_961,
        "max_image_bytes": len(png),
    }
    async with serving(tmp_path, entries, **limits) as client:
        assert (await post_msgpack(client, TINY_CLIP, [{"images": [image, image]}])).status_code == 200
        per_item = await post_msgpack(client, TINY_CLIP, [{"images": [image] * 3}])
        per_request = await post_msgpack(client, TINY_CLIP, [{"images": [image] * 2}, {"images": [image] * 2}])
        big = {"data": sample_images()["gray_png"][0], "format": "png"}  # 31 × 64 = 1,984 pixels
        pixels = await post_msgpack(client, TINY_CLIP, [{"images": [big]}])
        heavy = await post_msgpack(client, TINY_CLIP, [{"images": [{"data": png + b"\0", "format": "png"}]}])
    assert "at most 2 per item" in per_item.json()["detail"]["message"]
    assert "at most 3 per request" in per_request.json()["detail"]["message"]
    assert "1984 pixels; the limit is 1961" in pixels.json()["detail"]["message"]
    assert f"the limit is {len(png)} bytes" in heavy.json()["detail"]["message"]


async def test_a_msgpack_str_for_image_data_is_refused(image_models: dict[str, Path], tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_CLIP: catalog_text(TINY_CLIP, image_models[TINY_CLIP])}) as client:
        response = await post_msgpack(client, TINY_CLIP, [{"images": [{"data": "not bytes", "format": "png"}]}])
    assert response.status_code == 400
    assert "bytes" in response.json()["detail"]["message"]


async def test_text_only_models_keep_refusing_image_items(tmp_path: Path) -> None:
    folder = build_tiny_embedder(tmp_path / "embedder")
    entry = f"name: tiny/text\nadapter: sentence-embedder\nbackend: torch\nsource:\n  path: {folder}\ntasks: [encode]\n"
    png, _ = sample_images()["rgb_png"]
    async with serving(tmp_path, {"tiny/text": entry}) as client:
        response = await post_msgpack(client, "tiny/text", [{"images": [{"data": png, "format": "png"}]}])
        models = (await client.get("/v1/models/tiny/text")).json()
    assert response.status_code == 400
    assert response.json()["detail"] == {
        "code": "INVALID_INPUT",
        "message": "items[0]: this model accepts text only.",
    }
    assert models["inputs"] == ["text"]


async def test_models_route_says_image_models_read_images(image_models: dict[str, Path], tmp_path: Path) -> None:
    async with serving(tmp_path, {TINY_SIGLIP: catalog_text(TINY_SIGLIP, image_models[TINY_SIGLIP])}) as client:
        info = (await client.get(f"/v1/models/{TINY_SIGLIP}")).json()
    assert info["inputs"] == ["text", "image"]
    assert info["dims"] == {"dense": 32}


# ---- the adapter's rules, in process ------------------------------------------


def _decoded(name: str) -> Any:
    from sift_server.service.images import RawImage, decode_image

    data, fmt = sample_images()[name]
    return decode_image(RawImage(data, fmt, name), 10**8)


def _encode(adapter: ClipAdapter, task: EncodeTask) -> list[np.ndarray]:
    prepared = adapter.prepare(task)
    return list(adapter.forward([Part(prepared, 0, len(task.texts))])[0])


@pytest.mark.parametrize("model", MODELS)
def test_an_item_with_text_and_image_is_its_image_and_two_images_average_unit_vectors(
    image_models: dict[str, Path], model: str
) -> None:
    adapter = ClipAdapter.load(load_context(image_models[model]))
    a, b = _decoded("rgb_png"), _decoded("gray_png")
    one_a, one_b, both, with_text = _encode(
        adapter, EncodeTask(texts=["", "", "", TEXTS[0]], images=[(a,), (b,), (a, b), (a,)])
    )
    np.testing.assert_allclose(with_text, one_a, atol=1e-6)
    np.testing.assert_allclose(both, (one_a + one_b) / 2, atol=1e-6)
    assert np.linalg.norm(one_a) == pytest.approx(1.0, abs=1e-5)
    assert np.linalg.norm(both) < 1.0 - 1e-4  # not renormalised


@pytest.mark.parametrize("model", MODELS)
def test_vectors_do_not_depend_on_the_batch(image_models: dict[str, Path], model: str) -> None:
    adapter = ClipAdapter.load(load_context(image_models[model]))
    images = [_decoded(name) for name in ("rgb_png", "exif_jpeg", "palette_gif")]
    texts = [*TEXTS, "", "", ""]
    task = EncodeTask(texts=texts, images=[()] * len(TEXTS) + [(image,) for image in images])
    together = _encode(adapter, task)
    alone = [_encode(adapter, EncodeTask(texts=[t], images=[i])) for t, i in zip(texts, task.images, strict=True)]
    for x, y in zip(together, [v[0] for v in alone], strict=True):
        np.testing.assert_allclose(x, y, atol=2e-6)


def test_an_image_costs_its_patch_tokens_and_a_text_its_tokens(image_models: dict[str, Path]) -> None:
    adapter = ClipAdapter.load(load_context(image_models[TINY_CLIP]))
    image = _decoded("rgb_png")
    prepared = adapter.prepare(EncodeTask(texts=["", "a cat"], images=[(image, image), ()]))
    # 30 × 30 pixels in 6 × 6 patches: 25 patches and the class token, per image.
    assert prepared.item_costs[0] == 2 * 26
    assert prepared.input_tokens == prepared.item_costs[1] == len(adapter.tokenizer("a cat")["input_ids"])


def test_siglip_pads_every_text_to_its_context(image_models: dict[str, Path]) -> None:
    adapter = ClipAdapter.load(load_context(image_models[TINY_SIGLIP]))
    prepared = adapter.prepare(EncodeTask(texts=["x", TEXTS[2]]))
    assert prepared.item_costs == [64, 64]
    short = ClipAdapter.load(load_context(image_models[TINY_SIGLIP], max_sequence_length=16))
    assert short.prepare(EncodeTask(texts=["x"])).item_costs == [16]


def test_clip_entries_serve_on_torch_without_an_auto_decision(tmp_path: Path) -> None:
    from sift_server.registry.catalog import Catalog
    from sift_server.registry.switching import first_spec

    (tmp_path / "entry.yaml").write_text(f"name: x/clip\nadapter: clip\nsource:\n  path: {tmp_path}\ntasks: [encode]\n")
    (tmp_path / "model.safetensors").write_bytes(b"")
    spec = Catalog.from_dirs([tmp_path], include_shipped=False).get("x/clip")
    assert spec.backend == "auto"  # the default, which the clip adapter does not consult
    assert first_spec(spec) is None
    shipped = Catalog.from_dirs([])
    clips = [shipped.get(name) for name in shipped.names() if shipped.get(name).adapter == "clip"]
    assert {spec.name for spec in clips} >= {"openai/clip-vit-base-patch32", "google/siglip-so400m-patch14-384"}
    assert all(spec.source.revision for spec in clips)


async def test_a_body_over_a_mebibyte_is_decoded_in_slices_with_its_images(
    image_models: dict[str, Path], tmp_path: Path
) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(700, 900, 3), dtype=np.uint8)).save(out, format="PNG")
    big = out.getvalue()
    assert len(big) > 1 << 20  # past the sliced decoder's threshold (wire/sliced.py)
    items = [{"text": TEXTS[0]}, {"images": [{"data": big, "format": "png"}]}]
    as_json = [{"text": TEXTS[0]}, {"images": [{"data": base64.b64encode(big).decode(), "format": "png"}]}]
    async with serving(tmp_path, {TINY_CLIP: catalog_text(TINY_CLIP, image_models[TINY_CLIP])}) as client:
        packed = await post_msgpack(client, TINY_CLIP, items)
        response = await client.post(
            f"/v1/encode/{TINY_CLIP}", json={"items": as_json}, headers={"Accept": "application/json"}
        )
        small = await post_msgpack(client, TINY_CLIP, items[:1])
    assert packed.status_code == response.status_code == 200, (packed.text, response.text)
    vectors = dense(packed)
    np.testing.assert_allclose(vectors[0], dense(small)[0], atol=1e-6)
    np.testing.assert_allclose(vectors[1], np.array(response.json()["items"][1]["dense"]["values"]), atol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_a_text_past_the_context_is_cut_or_refused_by_overflow_policy(
    image_models: dict[str, Path], model: str
) -> None:
    from sift_server.errors import InputTooLong

    adapter = ClipAdapter.load(load_context(image_models[model]))
    long_text = " ".join([TEXTS[2]] * 20)
    cut = adapter.prepare(EncodeTask(texts=[long_text]))
    assert cut.item_costs == [adapter.max_length]
    with pytest.raises(InputTooLong, match=f"more than {adapter.max_length} tokens"):
        adapter.prepare(EncodeTask(texts=[long_text], overflow="error"))
