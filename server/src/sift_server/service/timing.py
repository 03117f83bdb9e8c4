"""Per-request timing, reported in the body and the X-*-Time headers."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(slots=True)
class Timing:
    started: float
    tokenization_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    postprocessing_s: float = 0.0
    total_s: float = 0.0

    def finish(self, postprocessing_started: float) -> None:
        """Close the postprocessing phase and the request's total."""
        now = time.perf_counter()
        self.postprocessing_s = now - postprocessing_started
        self.total_s = now - self.started

    def body(self) -> dict[str, float | None]:
        return {
            "total_ms": self.total_s * 1000,
            "queue_ms": self.queue_s * 1000,
            "tokenization_ms": self.tokenization_s * 1000,
            "inference_ms": self.inference_s * 1000,
            "postprocessing_ms": self.postprocessing_s * 1000 if self.postprocessing_s > 0 else None,
        }

    def headers(self, total_now_s: float) -> dict[str, str]:
        headers = {
            "X-Queue-Time": f"{self.queue_s * 1000:.2f}",
            "X-Tokenization-Time": f"{self.tokenization_s * 1000:.2f}",
            "X-Inference-Time": f"{self.inference_s * 1000:.2f}",
            "X-Total-Time": f"{total_now_s * 1000:.2f}",
        }
        if self.postprocessing_s > 0:
            headers["X-Postprocessing-Time"] = f"{self.postprocessing_s * 1000:.2f}"
        return headers
