"""Server settings: command-line flags override ``SIFT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sift_server.engine.policy import AdaptivePolicy, TimedPolicy
from sift_server.engine.scheduler import SchedulerConfig
from sift_server.errors import MAX_RETRY_AFTER_S
from sift_server.registry.registry import RECENT_USE_S

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_ADAPTIVE, _TIMED, _SCHEDULER = AdaptivePolicy(), TimedPolicy(), SchedulerConfig()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIFT_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    default_model: str = DEFAULT_MODEL
    # Extra catalog folders with operators' own YAML files (added to the shipped catalog).
    catalog: list[Path] = Field(default_factory=list)
    # Models loaded before /readyz turns ready (the default model is always one).
    preload: list[str] = Field(default_factory=list)

    policy: Literal["adaptive", "timed", "immediate"] = "adaptive"
    # Engine knobs; their defaults are the engine's own (in milliseconds here).
    max_hold_ms: float = _ADAPTIVE.max_hold * 1000
    # A head held for a learned burst whose requests keep arriving waits at most this.
    max_burst_hold_ms: float = _ADAPTIVE.max_burst_hold * 1000
    # Arrivals closer than this belong to one cluster (a burst in the making).
    link_gap_ms: float = _SCHEDULER.link_gap * 1000
    # ...and, while earlier requests are still queued or running, this far apart
    # (a running forward slows the reading of the rest of a burst on a shared core).
    busy_link_gap_ms: float = _SCHEDULER.busy_link_gap * 1000
    # A cluster that starts after this much silence may teach the next burst's size.
    quiet_gap_ms: float = _SCHEDULER.quiet_gap * 1000
    idle_coalesce_ms: float = _TIMED.idle_coalesce * 1000
    max_batch_wait_ms: float = _TIMED.max_wait * 1000
    max_batch_requests: int = _SCHEDULER.caps.max_requests
    max_batch_cost: int = _SCHEDULER.caps.max_cost
    # Items queued per model beyond which new requests get 503 QUEUE_FULL.
    max_queue_items: int = _SCHEDULER.max_queue_items
    # Items one request may carry (400 beyond it); a request larger than the
    # room left in the queue still enters once there is room, and waits its turn.
    max_request_items: int = 512
    # A request still queued after this long gets 503 QUEUE_FULL instead of an
    # answer nobody waits for.
    queue_timeout_s: float = _SCHEDULER.queue_timeout
    # Hold a free worker for the rest of a returning wave of closed-loop clients
    # (where the model's fixed forward cost says it pays), at most this long.
    return_horizon_ms: float = _SCHEDULER.return_horizon * 1000
    # Measure each embedder's forward-time curve after load; under sustained load
    # batches are capped at its most efficient size (adds about a second to a load).
    calibrate: bool = True
    # Lower CPU priority of forward threads so ingress keeps up while a forward runs.
    forward_nice: int = 10

    # One intra-op thread per core is a sensible default for small machines.
    torch_threads: int = 0
    memory_budget_mb: int = 8_192
    # A model used this recently is not evicted for another one (its clients may
    # be waiting out a Retry-After); 0 makes eviction plain least-recently-used.
    evict_idle_s: float = Field(default=RECENT_USE_S, ge=0)

    max_body_bytes: int = 35_651_584
    # A request body not received in full within this many seconds gets a 408
    # and its connection is closed (slow or stalled clients hold no slot forever).
    body_timeout_s: float = Field(default=60.0, gt=0)
    max_item_bytes: int = 2 * 1024 * 1024
    # Images of encode items (models that read images): per item, per request,
    # encoded bytes of one image, decoded pixels of one (checked from its header).
    max_images_per_item: int = Field(default=16, ge=1)
    max_images_per_request: int = Field(default=256, ge=1)
    max_image_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    max_image_pixels: int = Field(default=50_000_000, ge=1)
    shutdown_grace_s: float = 30.0
    # Idle keep-alive connections are closed after this (clients that pool
    # connections longer should keep theirs below it). Always longer than any
    # Retry-After the server sends, so a client that waits exactly Retry-After
    # never reuses a connection the server is closing at that moment.
    keep_alive_s: int = 2 * MAX_RETRY_AFTER_S
    trace_file: Path | None = None
    # OpenTelemetry over OTLP/HTTP (telemetry/); OTEL_EXPORTER_OTLP_ENDPOINT also turns it on.
    otlp_endpoint: str | None = None
    log_level: str = "info"
    # glibc only: cap the malloc arenas (0 leaves glibc's default of 8 per core).
    # Every malloc_trim_s seconds (0: never) run a full garbage collection and
    # return freed heap to the OS, so RSS stays flat under steady load.
    malloc_arena_max: int = Field(default=2, ge=0)
    malloc_trim_s: float = Field(default=10.0, ge=0)

    @field_validator("keep_alive_s")
    @classmethod
    def _keep_alive_outlasts_retry_after(cls, value: int) -> int:
        if value <= MAX_RETRY_AFTER_S:
            raise ValueError(
                f"keep_alive_s must be more than {MAX_RETRY_AFTER_S} s, the longest Retry-After the server sends"
            )
        return value
