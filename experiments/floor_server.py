"""The floor under issue 20's tiny-model figure: the least a Python server on the same stack
can spend per one-text encode request, to set Sift's own cost against.

A bare ASGI app under the same uvicorn (httptools, uvloop) that reads the JSON body with
msgspec, tokenizes the one text with Sift's own adapter (``prepare``), queues it, runs
whatever is queued as one forward of Sift's own adapter in one executor thread as soon as the
previous forward ends (continuous batching, no policy, no limits, no validation, no error
envelopes, no metrics, no trace), and answers ``{"items": [{"dense": [...]}]}``. Everything it
leaves out is work the contract asks of Sift, so this is a floor, not a competitor: what is
left between it and Sift is the price of that work on this CPU.

    SIFT_BACKEND=onnx:fp32 taskset -c 0 python experiments/floor_server.py CATALOG MODEL PORT

(``experiments/request_cost_ab.sh`` starts it for a tree named ``floor``.)
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import uvicorn

from sift_server.adapters.base import EncodeTask, Part, Prepared
from sift_server.registry.catalog import Catalog
from sift_server.registry.loader import load_adapter


class Item(msgspec.Struct):
    text: str


class Body(msgspec.Struct):
    items: list[Item]


def make_app(catalog: Path, model: str) -> Any:
    adapter = load_adapter(Catalog.from_dirs([catalog]).get(model), torch_threads=1)
    executor = ThreadPoolExecutor(max_workers=1)
    decoder = msgspec.json.Decoder(Body)
    encoder = msgspec.json.Encoder()
    queued: list[tuple[Prepared, asyncio.Future[Any]]] = []
    running = False

    def run_queued() -> None:
        nonlocal running
        if running or not queued:
            return
        batch = queued[:]
        queued.clear()
        running = True
        parts = [Part(prepared, 0, len(prepared.item_costs)) for prepared, _ in batch]
        future = asyncio.get_running_loop().run_in_executor(executor, adapter.forward, parts)

        def done(fut: asyncio.Future[list[list[Any]]]) -> None:
            nonlocal running
            running = False
            for (_, waiter), outputs in zip(batch, fut.result(), strict=True):
                waiter.set_result(outputs)
            run_queued()

        future.add_done_callback(done)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":  # readiness
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = decoder.decode(b"".join(chunks))
        prepared = adapter.prepare(EncodeTask([item.text for item in body.items]))
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queued.append((prepared, waiter))
        asyncio.get_running_loop().call_soon(run_queued)
        vectors = await waiter
        content = encoder.encode({"items": [{"dense": vector.tolist()} for vector in vectors]})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    return app


if __name__ == "__main__":
    app = make_app(Path(sys.argv[1]), sys.argv[2])
    uvicorn.run(app, port=int(sys.argv[3]), http="httptools", loop="uvloop", log_level="warning", access_log=False)
