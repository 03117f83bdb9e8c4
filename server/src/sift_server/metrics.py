"""Prometheus metrics. Batch and queue names follow SIE 0.3.1 so existing
dashboards keep working; dispatch reasons are Sift's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sift_server.engine.trace import ForwardRecord

_ITEM_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class Metrics:
    def __init__(self, known_models: frozenset[str] = frozenset()) -> None:
        self.known_models = known_models
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "sie_requests",
            "Requests by model, endpoint and status.",
            ["model", "endpoint", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "sie_request_duration_seconds",
            "Request time by phase.",
            ["model", "endpoint", "phase"],
            registry=self.registry,
        )
        self.batch_items = Histogram(
            "sie_gpu_batch_items", "Items per forward.", ["model"], buckets=_ITEM_BUCKETS, registry=self.registry
        )
        self.batch_tokens = Histogram(
            "sie_gpu_batch_tokens", "Tokens per forward.", ["model"], buckets=_TOKEN_BUCKETS, registry=self.registry
        )
        self.dispatches = Counter(
            "sift_batch_dispatch", "Forwards by dispatch reason.", ["model", "reason"], registry=self.registry
        )
        self.forward_seconds = Histogram(
            "sift_forward_seconds", "Forward wall time.", ["model"], registry=self.registry
        )
        self.queue_depth = Gauge("sie_queue_depth", "Items queued per model.", ["model"], registry=self.registry)
        # Labelled children by label values: ``labels()`` costs microseconds per call.
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def count(self, model: str, endpoint: str, status: int, seconds: float | None = None) -> None:
        """One finished request. Names outside the catalog share one label value,
        so clients cannot grow the label set without bound."""
        label = model if model in self.known_models else "(other)"
        key = (label, endpoint, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children.setdefault(
                key,
                (self.requests.labels(label, endpoint, str(status)), self.duration.labels(label, endpoint, "total")),
            )
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)

    def observe_forward(self, record: ForwardRecord) -> None:
        self.batch_items.labels(record.model).observe(record.items)
        self.batch_tokens.labels(record.model).observe(record.cost)
        self.dispatches.labels(record.model, record.reason).inc()
        self.forward_seconds.labels(record.model).observe(max(0.0, record.end - record.start))
