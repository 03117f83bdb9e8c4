"""Share of a server's busy samples per request stage, from py-spy's raw (collapsed) output.

    profile_stages.py PROFILE.txt [--other]

A sample counts for the first stage (in the order below) with a frame on its stack. Samples of
an idle executor thread are left out; the event loop's own C code (uvloop: socket reads and
writes, callbacks, and its idle wait) is one line of its own."""

from __future__ import annotations

import collections
import sys

STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("forward (executor thread)", ("_WorkItem.run",)),
    ("tokenize (adapter.prepare)", ("SentenceEmbedderAdapter.prepare", "prepare (sift_server/service/run.py")),
    ("decode request body", ("decode_sliced", "decode_body", "parse_embeddings")),
    ("encode answer body", ("encode_sliced", "embeddings_answer", "encode_body")),
    ("read request body", ("read_body_buffer", "read_asgi_body")),
    ("send response", ("Response.__call__", "as_response", "Response.__init__", "send_reply")),
    (
        "engine on the loop: submit, decide, dispatch, fan-out",
        ("ModelWorker.", "Scheduler.", "IngressBoard.", "Registry.begin_ingress"),
    ),
    ("metrics", ("Metrics.",)),
    (
        "service and core: validation, options, shaping, futures",
        (
            "encode (sift_server/service",
            "handle (sift_server/core",
            "_native (sift_server/core",
            "_embeddings (sift_server/core",
            "respond (sift_server/api",
            "answer (sift_server/api",
            "scope_headers",
            "embeddings (sift_server/api",
            "run_task",
            "_unless_disconnected",
        ),
    ),
    ("front door and FastAPI/Starlette layers", ("RequestResponseCycle.run_asgi",)),
    ("HTTP parsing (httptools callbacks)", ("HttpToolsProtocol.",)),
    ("garbage collection", ("collect_request_garbage", "reclaim_memory")),
]
IDLE = ("_worker (concurrent/futures/thread.py:81)", "Condition.wait", "_PollLikeSelector.select")
LOOP = "Runner.run (asyncio/runners.py"


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    busy = idle = 0
    with open(sys.argv[1], encoding="utf-8") as profile:
        lines = profile.read().splitlines()
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        samples, frames = int(n), stack.split(";")
        if frames[-1].startswith(IDLE):
            idle += samples
            continue
        busy += samples
        if frames[-1].startswith(LOOP):
            counts["event loop in C (uvloop: sockets, callbacks, idle wait)"] += samples
            continue
        stage = next((s for s, marks in STAGES if any(f.startswith(marks) for f in frames)), None)
        counts[stage or "other: " + frames[-1][:80]] += samples
    print(f"busy samples {busy} (idle executor samples left out: {idle})")
    other = sum(c for s, c in counts.items() if s.startswith("other: "))
    for stage, c in counts.most_common():
        if not stage.startswith("other: "):
            print(f"{c / busy:6.1%}  {stage}")
    print(f"{other / busy:6.1%}  other")
    if "--other" in sys.argv:
        for stage, c in counts.most_common(20):
            if stage.startswith("other: "):
                print(f"   {c / busy:6.1%}  {stage}")


if __name__ == "__main__":
    main()
