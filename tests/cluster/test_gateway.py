"""Gateway behaviour against real processes: nats-server, a gateway, two workers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import msgpack
import nats
import pytest

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import metric, post, start_cluster, wait_workers
from tests.cluster.sleeper import write_sleeper_entry
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("gw")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "tiny"))
    write_sleeper_entry(catalog, "test/sleeper", 20)
    write_sleeper_entry(catalog, "test/slow", 1000)
    write_sleeper_entry(catalog, "test/orphan", 20)
    common = ["--catalog", str(catalog), "--no-calibrate", "--torch-threads", "1"]
    cluster = start_cluster(
        root / "cluster",
        0,
        [],
        ["--catalog", str(catalog), "--model", "test/sleeper", "--api-key", KEY, "--stream-max-msgs-per-model", "3"],
    )
    from tests.cluster.conftest import add_worker

    try:
        add_worker(cluster, "w-tiny", [*common, "--model", TINY_EMBEDDER])
        add_worker(cluster, "w-sleep", [*common, "--model", "test/sleeper", "--preload", "test/slow"])
        wait_workers(cluster, TINY_EMBEDDER, {"w-tiny"}, headers=AUTH)
        wait_workers(cluster, "test/slow", {"w-sleep"}, headers=AUTH)
        yield cluster
    finally:
        cluster.stop()


def test_routes_each_model_to_its_workers(cluster: LocalCluster) -> None:
    tiny = post(cluster.url, TINY_EMBEDDER, ["hello world"], headers=AUTH)
    assert tiny.status_code == 200, tiny.text
    assert tiny.headers["x-sift-worker"] == "w-tiny"
    assert tiny.json()["items"][0]["dense"]["dims"] == 32
    sleeper = post(cluster.url, "test/sleeper", ["a b c"], headers=AUTH)
    assert sleeper.status_code == 200, sleeper.text
    assert sleeper.headers["x-sift-worker"] == "w-sleep"
    assert sleeper.json()["items"][0]["dense"]["values"][0] == 5.0  # len("a b c")


def test_both_content_types_and_openai(cluster: LocalCluster) -> None:
    body = msgpack.packb({"items": [{"text": "x y"}], "params": {"output_dtype": "float32"}})
    packed = httpx.post(
        f"{cluster.url}/v1/encode/{TINY_EMBEDDER}",
        content=body,
        headers={**AUTH, "Content-Type": "application/msgpack", "Accept": "application/msgpack", "X-Request-ID": "r-1"},
    )
    assert packed.status_code == 200
    assert packed.headers["content-type"] == "application/msgpack"
    assert packed.headers["x-request-id"] == "r-1"
    assert msgpack.unpackb(packed.content)["model"] == TINY_EMBEDDER
    openai = httpx.post(
        f"{cluster.url}/v1/embeddings", json={"model": TINY_EMBEDDER, "input": ["one", "two"]}, headers=AUTH
    )
    assert openai.status_code == 200, openai.text
    assert [d["index"] for d in openai.json()["data"]] == [0, 1]
    # Validation happens as in sift serve: the gateway refuses a malformed body itself.
    bad = httpx.post(f"{cluster.url}/v1/encode/{TINY_EMBEDDER}", content=b"{nope", headers=AUTH)
    assert bad.status_code == 400 and bad.json()["detail"]["code"] == "INVALID_INPUT"
    wrong = httpx.post(f"{cluster.url}/v1/embeddings", json={"model": TINY_EMBEDDER}, headers=AUTH)
    # As sift serve answers it (the OpenAI envelope, the missing field named).
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "input"


def test_an_unknown_model_is_refused_at_once(cluster: LocalCluster) -> None:
    # A catalog model with no worker is queued instead (tests/cluster/test_cold_start.py).
    unknown = post(cluster.url, "no/such-model", ["x"], headers=AUTH, timeout=5.0)
    assert unknown.status_code == 404 and unknown.json()["detail"]["code"] == "MODEL_NOT_FOUND"


def test_auth_at_the_gateway(cluster: LocalCluster) -> None:
    assert post(cluster.url, "test/sleeper", ["x"]).status_code == 401
    assert post(cluster.url, "test/sleeper", ["x"], headers={"Authorization": "Bearer wrong"}).status_code == 401
    openai = httpx.post(f"{cluster.url}/v1/embeddings", json={"model": "test/sleeper", "input": "x"})
    assert openai.status_code == 401 and openai.json()["error"]["code"] == "unauthorized"
    assert httpx.get(cluster.url + "/readyz").status_code == 200  # probes stay open
    assert post(cluster.url, "test/sleeper", ["x"], headers=AUTH).status_code == 200


def test_stream_full_is_503_queue_full(cluster: LocalCluster) -> None:
    # test/slow holds each message one second; the stream takes 3 per model.
    with ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda i: post(cluster.url, "test/slow", [f"t {i}"], headers=AUTH), range(12)))
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {200, 503}, statuses
    full = [r for r in responses if r.status_code == 503]
    assert full, statuses
    for r in full:
        assert r.json()["detail"]["code"] == "QUEUE_FULL"
        assert r.headers["retry-after"]
    assert 200 in statuses
    assert metric(cluster.url, "sift_gateway_publish_refused_total", AUTH) >= len(full)


def test_duplicate_replies_are_dropped(cluster: LocalCluster) -> None:
    """A redelivered request may be answered twice: the client sees the first,
    the gateway drops the rest (here a second copy of a real reply)."""

    async def run() -> tuple[int, int]:
        nc = await nats.connect(cluster.nats_url)
        seen: list[nats.aio.msg.Msg] = []

        async def on_reply(msg: nats.aio.msg.Msg) -> None:
            seen.append(msg)

        await nc.subscribe("_SIFT.reply.>", cb=on_reply)
        await nc.flush()
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{cluster.url}/v1/encode/test/sleeper",
                json={"items": [{"text": "dup"}]},
                headers={**AUTH, "Accept": "application/json"},
            )
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.05)
        before = metric(cluster.url, "sift_gateway_duplicate_replies_total", AUTH)
        await nc.publish(seen[0].subject, seen[0].data)
        await nc.flush()
        await nc.close()
        for _ in range(100):
            if metric(cluster.url, "sift_gateway_duplicate_replies_total", AUTH) > before:
                break
            await asyncio.sleep(0.05)
        return response.status_code, int(metric(cluster.url, "sift_gateway_duplicate_replies_total", AUTH) - before)

    status, dropped = asyncio.run(run())
    assert status == 200
    assert dropped == 1


def test_gateway_serves_models_list_and_health(cluster: LocalCluster, tmp_path: Path) -> None:
    assert httpx.get(cluster.url + "/healthz").text == "ok"
    names = [m["name"] for m in httpx.get(cluster.url + "/v1/models", headers=AUTH).json()["models"]]
    assert TINY_EMBEDDER in names and "test/slow" in names
    # Described as sift serve describes a loaded model, from a live worker's heartbeat.
    tiny = httpx.get(f"{cluster.url}/v1/models/{TINY_EMBEDDER}", headers=AUTH).json()
    assert tiny["loaded"] is True and tiny["dims"] == {"dense": 32} and tiny["outputs"] == ["dense"]
    orphan = httpx.get(f"{cluster.url}/v1/models/test/orphan", headers=AUTH).json()
    assert orphan["loaded"] is False and orphan["dims"] == {}
    assert httpx.get(f"{cluster.url}/v1/models/no/such-model", headers=AUTH).status_code == 404


def test_sdk_works_through_the_gateway(cluster: LocalCluster) -> None:
    import numpy as np

    from sift_sdk import ModelNotFoundError, RequestError, SiftClient

    with SiftClient(cluster.url, api_key=KEY) as client:
        vectors = client.encode(TINY_EMBEDDER, ["hello world", "goodbye world"])
        assert vectors.shape == (2, 32) and vectors.dtype == np.float32
        full = client.encode_full(TINY_EMBEDDER, [{"id": "a", "text": "x"}])
        assert full.items[0]["id"] == "a" and full.timing is not None
        with pytest.raises(ModelNotFoundError):
            client.encode("no-such-org/no-such-model", "x")
        with pytest.raises(RequestError) as bad:
            client.encode(TINY_EMBEDDER, ["x"], output_dtype="bfloat16")
        assert bad.value.status_code == 400 and bad.value.code == "INVALID_INPUT"
