"""Sift's request work in process, no uvicorn (round 6, docs/benchmarks/request-cost.md).

FLIGHT tasks loop one-text JSON encodes (5-40 words) through the ASGI app with the real engine and
the catalog's model; prints the process CPU µs per request (all threads), requests/s and the
forwards' sizes, per round. Run it with the tree to measure first on PYTHONPATH:

    PYTHONPATH=TREE/server/src CAT=DIR MODEL=tiny/embedder SIFT_BACKEND=onnx:fp32 \
      taskset -c 1 .venv/bin/python inprocess_cost.py FLIGHT REQUESTS ROUNDS [PROFILE_OUT]

Environment: STUB=1 replaces the model's forward by constant vectors (what is left is the request
work); FLOOR=1 serves `sift bench floor`'s app instead of Sift's (needs bench/src on PYTHONPATH);
LAYER=handle|encode|engine enters below the ASGI app (core.serve.handle, service encode, engine
submit); NOINGRESS=1 drops the front door's ingress count; TIMEINGRESS=1 times the ingress calls.
PROFILE_OUT: a cProfile of the measured rounds (thread CPU time, the loop's thread only)."""
import asyncio, os, random, sys, time, cProfile, pstats
import msgspec, uvloop
from pathlib import Path
from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from sift_server.server import tune_collector

CAT = Path(os.environ.get("CAT", "/tmp/rc/catalog")); MODEL = os.environ.get("MODEL", "tiny/embedder")
WORDS = "the quick brown fox jumps over a lazy dog while search engines rank passages by meaning".split()

STATS = [0, 0]
from sift_server.adapters import sentence_embedder as _se
_orig = _se.SentenceEmbedderAdapter._forward
def _counted(self, parts, *a, **k):
    STATS[0] += 1; STATS[1] += len(parts)
    if os.environ.get("STUB"):
        import numpy as np
        v = np.zeros(64, np.float32)
        return [[v] * (p.stop - p.start) for p in parts]
    return _orig(self, parts, *a, **k)
_se.SentenceEmbedderAdapter._forward = _counted

async def main(flight, n, rounds, prof):
    settings = Settings(default_model=MODEL, catalog=[CAT], torch_threads=1, calibrate=False)
    state = build_state(settings, catalog=Catalog.from_dirs([CAT], include_shipped=False))
    if os.environ.get("FLOOR"):
        from concurrent.futures import ThreadPoolExecutor
        from sift_bench.tools.floor import make_app, Batcher
        from sift_bench.run.ceiling import load_model
        adapter = load_model(MODEL, [CAT], torch_threads=1)
        app = make_app(adapter, Batcher(adapter, ThreadPoolExecutor(max_workers=1)))
        import contextlib
        lifespan = contextlib.AsyncExitStack()
    else:
        app = create_app(state)
        lifespan = app.lifespan()
    await lifespan.__aenter__()
    tune_collector()
    rng = random.Random(0)
    bodies = [msgspec.json.encode({"items": [{"text": " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))}]}) for _ in range(64)]
    path = f"/v1/encode/{MODEL}"
    never = asyncio.get_running_loop().create_future()
    async def one(body):
        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
                 "headers": [(b"host", b"x"), (b"content-type", b"application/json"), (b"accept", b"application/json"),
                             (b"content-length", str(len(body)).encode())],
                 "query_string": b"", "root_path": "", "http_version": "1.1", "scheme": "http",
                 "server": ("127.0.0.1", 1), "client": ("127.0.0.1", 2), "state": {}}
        got = False
        async def receive():
            nonlocal got
            if not got:
                got = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never
        status = []
        async def send(m):
            if m["type"] == "http.response.start": status.append(m["status"])
        await app(scope, receive, send)
        assert status == [200], status
    LAYER = os.environ.get("LAYER", "app")
    if os.environ.get("NOINGRESS"):
        state.registry.begin_ingress = lambda *a, **k: None
    from sift_server.core.serve import Call, handle, new_request_id
    from sift_server.core.endpoints import route
    from sift_server.service.run import RequestContext
    from sift_server.service.encode import encode
    from sift_server.wire.sliced import decode_sliced
    from sift_server.adapters.base import EncodeTask
    endpoint = route(path)[0]
    hdrs = {"content-type": "application/json", "accept": "application/json"}
    async def one_handle(body):
        await handle(state, Call(endpoint, MODEL, hdrs, memoryview(body), started=time.perf_counter()))
    decoded = [await decode_sliced(memoryview(b), "json", endpoint.schema, "items", __import__("sift_server.wire.schemas", fromlist=["Item"]).Item) for b in bodies] if LAYER == "encode" else None
    async def one_encode(k):
        ctx = RequestContext(new_request_id(), time.perf_counter(), None, None, prep=state.prep)
        await encode(state.registry, MODEL, decoded[k], state.limits, ctx)
    rec, eng = state.registry.ready_engine(MODEL) if LAYER == "engine" else (None, None)
    texts = [msgspec.json.decode(b)["items"][0]["text"] for b in bodies]
    async def one_engine(k):
        prepared = rec.adapter.prepare(EncodeTask(texts=[texts[k]]))
        t = eng.submit(prepared, request_id="x")
        await t.future
    async def worker(i, count):
        for k in range(count):
            j = (i + k * flight) % 64
            if LAYER == "app": await one(bodies[j])
            elif LAYER == "handle": await one_handle(bodies[j])
            elif LAYER == "encode": await one_encode(j)
            else: await one_engine(j)
    await asyncio.gather(*(worker(i, 50) for i in range(flight)))  # warm
    if os.environ.get("TIMEINGRESS"):
        import timeit
        from sift_server.service.common import split_profile
        eng_ = state.registry.records[MODEL].engine
        sch = eng_.scheduler
        for name, f in [("begin+end", lambda: state.registry.begin_ingress(MODEL).end()),
                        ("header_arrived+ended", lambda: (sch.header_arrived(time.perf_counter()), sch.ingress_ended())),
                        ("arrivals.observe", lambda: sch.arrivals.observe(time.perf_counter(), in_flight=True, returning=False)),
                        ("waves.observe", lambda: sch.waves.observe(time.perf_counter())),
                        ("waves.awaiting", lambda: sch.waves.awaiting(time.perf_counter())),
                        ("idle", lambda: sch.idle),
                        ("split_profile", lambda: split_profile(MODEL))]:
            print(name, f"{timeit.timeit(f, number=20000)/20000*1e6:.2f} us", flush=True)
        return
    out = []
    STATS[:] = [0, 0]
    pr = cProfile.Profile(time.thread_time) if prof else None
    for _ in range(rounds):
        t, w = time.process_time(), time.perf_counter()
        if pr: pr.enable()
        await asyncio.gather(*(worker(i, n // flight) for i in range(flight)))
        if pr: pr.disable()
        out.append(((time.process_time() - t) / n * 1e6, n / (time.perf_counter() - w)))
    print(" ".join(f"{c:.0f}us/{r:.0f}rps" for c, r in out), f"forwards={STATS[0]} parts/forward={STATS[1]/max(1,STATS[0]):.1f}", flush=True)
    if pr:
        pr.dump_stats(prof)
    await lifespan.__aexit__(None, None, None)

flight, n, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
uvloop.run(main(flight, n, rounds, sys.argv[4] if len(sys.argv) > 4 else None))
