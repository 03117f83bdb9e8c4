"""Prometheus metrics. Batch and queue names follow SIE 0.3.1 so existing
dashboards keep working; dispatch reasons are Sift's own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sift_server.engine.trace import ForwardRecord

_ITEM_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# (model, loaded, memory bytes) for every catalog model, read at each scrape.
ModelStates = Callable[[], Iterable[tuple[str, bool, int]]]


class _ModelCollector(Collector):
    """Loaded models and their memory, read from the registry when scraped."""

    def __init__(self, states: ModelStates) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        loaded = GaugeMetricFamily("sift_model_loaded", "1 when the model is loaded, else 0.", labels=["model"])
        memory = GaugeMetricFamily(
            "sift_model_memory_bytes", "Weights and buffers of a loaded model.", labels=["model"]
        )
        for name, is_loaded, size in self._states():
            loaded.add_metric([name], 1.0 if is_loaded else 0.0)
            memory.add_metric([name], float(size if is_loaded else 0))
        yield loaded
        yield memory


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
        self.queue_wait = Histogram(
            "sift_queue_wait_seconds",
            "Time a request waited in the queue before the forward that ran it started.",
            ["model"],
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.generation_active = Gauge(
            "sift_generation_active", "Generations running now (engine or upstream).", ["model"], registry=self.registry
        )
        self.generation_ended = Counter(
            "sift_generation_ended",
            "Generations ended, by why: stop, length, cancelled (the client went away) or error.",
            ["model", "reason"],
            registry=self.registry,
        )
        self.generation_tokens = Counter(
            "sift_generation_tokens", "Prompt and completion tokens.", ["model", "kind"], registry=self.registry
        )
        # Resident memory, CPU seconds and open files of the process (Linux).
        ProcessCollector(registry=self.registry)
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

    def generation_started(self, model: str) -> None:
        self.generation_active.labels(self._label(model)).inc()

    def generation_done(self, model: str, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        label = self._label(model)
        self.generation_active.labels(label).dec()
        self.generation_ended.labels(label, reason).inc()
        self.generation_tokens.labels(label, "prompt").inc(prompt_tokens)
        self.generation_tokens.labels(label, "completion").inc(completion_tokens)

    def _label(self, model: str) -> str:
        return model if model in self.known_models else "(other)"

    def observe_forward(self, record: ForwardRecord) -> None:
        self.batch_items.labels(record.model).observe(record.items)
        self.batch_tokens.labels(record.model).observe(record.cost)
        self.dispatches.labels(record.model, record.reason).inc()
        self.forward_seconds.labels(record.model).observe(max(0.0, record.end - record.start))
        wait = self.queue_wait.labels(record.model)
        for admitted in record.admitted:
            wait.observe(max(0.0, record.start - admitted))

    def watch_models(self, states: ModelStates) -> None:
        """Export ``sift_model_loaded`` and ``sift_model_memory_bytes`` from ``states``."""
        self.registry.register(_ModelCollector(states))
