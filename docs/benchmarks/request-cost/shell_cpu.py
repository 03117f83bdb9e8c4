"""CPU per request of the HTTP shell alone (front door, dispatch, body read, reply
send) with the serving core replaced by a constant reply; run once per tree."""
import asyncio, sys, time
import sift_server
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.core.serve import Reply

async def fake_handle(state, call):
    return Reply(200, {"X-SIE-Served-By": "local"}, b'{"items":[]}')

def build():
    import sift_server.api.app as app_module
    if hasattr(app_module, "SiftApp") and hasattr(app_module.SiftApp, "build_middleware_stack"):
        import sift_server.api.respond as respond
        respond.handle = fake_handle
    else:
        app_module.handle = fake_handle
    state = build_state(Settings(calibrate=False))
    return app_module.create_app(state)

async def main(n, rounds):
    app = build()
    scope0 = {"type": "http", "method": "POST", "path": "/v1/encode/sentence-transformers/all-MiniLM-L6-v2",
              "headers": [(b"content-type", b"application/json"), (b"content-length", b"27"), (b"host", b"x")],
              "query_string": b"", "root_path": "", "http_version": "1.1", "scheme": "http",
              "server": ("127.0.0.1", 1), "client": ("127.0.0.1", 2)}
    body = {"type": "http.request", "body": b'{"items": [{"text": "hi"}]}', "more_body": False}
    async def receive(): return body
    sent = []
    async def send(m): sent.append(m)
    # old SiftApp builds its stack on first FastAPI entry: one warm-up call through it
    for _ in range(200):
        await app(dict(scope0), receive, send)
    assert sent[0]["status"] == 200, sent[:2]
    out = []
    for _ in range(rounds):
        sent.clear()
        t = time.process_time()
        for _ in range(n):
            await app(dict(scope0), receive, send)
        out.append((time.process_time() - t) / n * 1e6)
    print(" ".join(f"{x:.2f}" for x in out))

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
