"""Does OpenVINO GenAI's ``ContinuousBatchingPipeline.step()`` hold the GIL?

``taskset -c 0 .venv/bin/python bench/tools/gil_during_step.py OV_FOLDER``: a thread sleeps
1 ms in a loop (each wake-up must take the GIL back), alone and while another thread
steps the pipeline without pause (one request kept going by a grammar of letters). If
``step()`` holds the GIL, the wake-ups wait out the steps. OV_FOLDER is an exported model,
e.g. generation_engines.py's ``OUT/ov``. docs/generation.md reports a run."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


def wakeups(n: int = 600) -> str:
    waits = []
    for _ in range(n):
        start = time.perf_counter()
        time.sleep(0.001)
        waits.append((time.perf_counter() - start) * 1000)
    waits.sort()
    p50, p90, p99 = waits[n // 2], waits[int(n * 0.9)], waits[int(n * 0.99)]
    return f"p50 {p50:.2f}  p90 {p90:.2f}  p99 {p99:.2f}  max {waits[-1]:.2f} ms"


def main() -> None:
    import numpy as np
    import openvino as ov
    import openvino_genai as og

    scheduler = og.SchedulerConfig()
    scheduler.cache_size = 1
    scheduler.max_num_seqs = 4
    properties = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "INFERENCE_NUM_THREADS": 1}
    pipe = og.ContinuousBatchingPipeline(sys.argv[1], scheduler, "CPU", properties)
    stop = threading.Event()
    steps = [0, 0.0]

    def engine() -> None:
        handles: list[Any] = []  # a request whose handle is dropped is dropped by the pipeline
        while not stop.is_set():
            if not pipe.has_non_finished_requests():
                config = og.GenerationConfig()
                config.update_generation_config(eos_token_id=pipe.get_config().eos_token_id)
                config.max_new_tokens = 900
                config.structured_output_config = og.StructuredOutputConfig(regex="[a-z]{900}")
                prompt = ov.Tensor(np.asarray([[1, 2, 3, 4]], dtype=np.int64))
                handles.append(pipe.add_request(len(handles), prompt, config))
            start = time.perf_counter()
            pipe.step()
            steps[0] += 1
            steps[1] += time.perf_counter() - start

    print("1 ms sleep, alone:          ", wakeups())
    thread = threading.Thread(target=engine)
    thread.start()
    time.sleep(1)
    print("1 ms sleep, beside step():  ", wakeups(), f"(mean step {1000 * steps[1] / steps[0]:.1f} ms)")
    stop.set()
    thread.join()


if __name__ == "__main__":
    main()
