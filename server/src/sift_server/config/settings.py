"""The operator's settings, in groups; each one a flag and a ``SIFT_*`` variable.

Every group is a model of its own; ``Settings`` is all of them at once, read
from the environment (``SIFT_<NAME>``) with the flags given on top. Each command
offers the flags of the groups it uses (``config.flags.COMMAND_GROUPS``).

The batching model's constants (link gaps, return horizons, burst holds, the
share of a forward a wave hold may take) are no settings: they are the
engine's own (``engine.scheduler.SchedulerConfig``, ``engine.policy``), tuned
with the simulator; an operator bounds the batching with the knobs below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sift_server.engine.policy import AdaptivePolicy, TimedPolicy
from sift_server.engine.scheduler import SchedulerConfig
from sift_server.errors import MAX_RETRY_AFTER_S
from sift_server.registry.residency import ResidencyConfig

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
ENV_PREFIX = "SIFT_"
_ADAPTIVE, _TIMED, _SCHEDULER = AdaptivePolicy(), TimedPolicy(), SchedulerConfig()
_RESIDENCY = ResidencyConfig()


def setting(default: Any, help: str, *, flag: str | None = None, **constraints: Any) -> Any:
    """A field with its help text (and a flag name where it is not ``--name-with-dashes``)."""
    extra: dict[str, JsonValue] | None = {"flag": flag} if flag else None
    return Field(default, description=help, json_schema_extra=extra, **constraints)


class ServerSettings(BaseModel):
    """The HTTP front door (``sift serve``, ``sift gateway``)."""

    host: str = setting("127.0.0.1", "Bind address.")
    port: int = setting(8080, "Port.")
    api_key: str | None = setting(None, "Require 'Authorization: Bearer KEY'.")
    # Idle keep-alive connections are closed after this (clients that pool connections
    # longer should keep theirs below it). Always longer than any Retry-After the server
    # sends, so a client that waits exactly Retry-After never reuses a closing connection.
    keep_alive_s: int = setting(
        2 * MAX_RETRY_AFTER_S, f"Close idle keep-alive connections after this (must exceed {MAX_RETRY_AFTER_S})."
    )
    max_body_bytes: int = setting(35_651_584, "Largest request body (413 beyond).", ge=1)
    # Slow or stalled clients hold no slot forever.
    body_timeout_s: float = setting(60.0, "408 and close when a request body takes longer than this.", gt=0)

    @field_validator("keep_alive_s")
    @classmethod
    def _keep_alive_outlasts_retry_after(cls, value: int) -> int:
        if value <= MAX_RETRY_AFTER_S:
            raise ValueError(
                f"keep_alive_s must be more than {MAX_RETRY_AFTER_S} s, the longest Retry-After the server sends"
            )
        return value


class FrontendSettings(BaseModel):
    """``sift serve``'s processes (sift_server/frontend, docs/benchmarks/frontends.md)."""

    frontends: int = setting(
        0,
        "Run the request work (HTTP, decoding, tokenizing, answers) in this many front-end processes that hand "
        "prepared requests to one engine process (0: one process, the default).",
        ge=0,
        le=64,
    )


class ProcessSettings(BaseModel):
    """Every long-running command."""

    log_level: str = setting("info", "Log level: debug, info, warning, error.")
    shutdown_grace_s: float = setting(30.0, "Time to finish queued work on SIGTERM.", ge=0)
    # OTEL_EXPORTER_OTLP_ENDPOINT (OpenTelemetry's own variable) also turns it on.
    otlp_endpoint: str | None = setting(
        None, "Send OpenTelemetry traces over OTLP/HTTP to this collector (needs the otel extra)."
    )


class ModelSettings(BaseModel):
    """Which models there are and which one is the default."""

    default_model: str = setting(DEFAULT_MODEL, "Default model, loaded before /readyz turns ready.", flag="--model")
    catalog: list[Path] = setting([], "Folder of extra catalog YAML files (repeatable; variable: a JSON list).")


class LimitsSettings(BaseModel):
    """What one request may carry (checked where the work is decoded: ``sift serve``, ``sift worker``)."""

    max_request_items: int = setting(512, "Items one request may carry (400 beyond).", ge=1)
    max_item_bytes: int = setting(2 * 1024 * 1024, "Bytes of one item (400 beyond).", ge=1)
    max_images_per_item: int = setting(16, "Images of one encode item.", ge=1)
    max_images_per_request: int = setting(256, "Images of one request.", ge=1)
    max_image_bytes: int = setting(16 * 1024 * 1024, "Encoded bytes of one image.", ge=1)
    max_image_pixels: int = setting(50_000_000, "Decoded pixels of one image (checked from its header).", ge=1)


class EngineSettings(BaseModel):
    """Loading models and batching their requests."""

    preload: list[str] = setting([], "Another model to load at start (repeatable; variable: a JSON list).")
    policy: Literal["adaptive", "timed", "immediate"] = setting("adaptive", "Batching policy.")
    max_hold_ms: float = setting(
        _ADAPTIVE.max_hold * 1000, "adaptive: longest an idle worker holds a request for an expected burst.", ge=0
    )
    max_batch_wait_ms: float = setting(
        _TIMED.max_wait * 1000, "timed: longest a request waits for its batch to fill.", ge=0
    )
    max_batch_requests: int = setting(
        _SCHEDULER.caps.max_requests, "Requests in one forward (a catalog entry may set its own).", ge=1
    )
    max_batch_cost: int = setting(
        _SCHEDULER.caps.max_cost,
        "Tokens (or pixels' equivalent) in one forward (a catalog entry may set its own).",
        ge=1,
    )
    max_queue_items: int = setting(
        _SCHEDULER.max_queue_items,
        "Items queued per model before 503 QUEUE_FULL (a request larger waits its turn).",
        ge=1,
    )
    queue_timeout_s: float = setting(_SCHEDULER.queue_timeout, "A request queued longer gets 503 QUEUE_FULL.", gt=0)
    # Adds about a second to a load; under sustained load batches are capped at the efficient size.
    calibrate: bool = setting(
        True,
        "Measure each embedder's forward-time curve after load, once per entry, runtime and machine "
        "(recorded in the artifact cache; --no-calibrate: skip).",
    )
    torch_threads: int = setting(0, "Intra-op threads per forward (0: one per available core).", ge=0)
    backend: str | None = setting(
        None, "Run every model on this backend, overriding the catalog: BACKEND[:PRECISION], e.g. onnx:int8."
    )
    rechoose_backend: bool = setting(
        False, "For every auto entry, time the backends again at load instead of reusing the recorded choice."
    )
    trace_file: Path | None = setting(None, "Append one JSON line per forward (for benchmarks).")
    open_loop_rules: bool = setting(
        _SCHEDULER.open_loop_rules,
        "Experimental: once arrivals look independent of answers (an open loop), run the whole backlog "
        "in sub-forwards of the efficient size, each answered as it ends (docs/batching.md).",
    )

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None
        # Imported here: the backends' vocabulary, without loading a runtime.
        from sift_server.adapters.backends.request import check_pair

        backend, _, precision = value.strip().partition(":")
        try:
            check_pair(backend.strip(), precision.strip() or None)
        except ValueError as error:
            raise ValueError(f"expected BACKEND[:PRECISION]: {error}") from None
        return value.strip()


class MemorySettings(BaseModel):
    """How much the models may take, and where exported artifacts are kept."""

    memory_budget_mb: int = setting(8_192, "Models that do not fit together take turns within this.", ge=1)
    # How models share the budget: registry/residency.py, docs/models.md.
    evict_idle_s: float = setting(
        _RESIDENCY.linger_s, "A model used this recently still has clients (it keeps its turn).", ge=0
    )
    swap_payback: float = setting(
        _RESIDENCY.payback, "A model with clients serves at least this many times its load time per turn.", ge=0
    )
    min_turn_s: float = setting(
        _RESIDENCY.min_turn_s, "A model with clients keeps its memory at least this long per turn.", ge=0
    )
    cache_dir: Path | None = setting(
        None, "Exported models and backend decisions (default $XDG_CACHE_HOME/sift/artifacts)."
    )


class HeapSettings(BaseModel):
    """glibc's heap in the processes that serve HTTP (``sift serve``, ``sift gateway``)."""

    malloc_arena_max: int = setting(2, "glibc only: cap the malloc arenas (0: glibc's default of 8 per core).", ge=0)
    malloc_trim_s: float = setting(
        10.0, "Collect garbage and return freed heap to the OS this often (0: never), so RSS stays flat.", ge=0
    )


class ClusterSettings(BaseModel):
    """NATS JetStream (``sift gateway``, ``sift worker``)."""

    nats_url: str = setting(DEFAULT_NATS_URL, "NATS server(s), comma-separated.")
    hop_stamps: bool = setting(False, "Add per-hop timestamps (X-Sift-Stamps) to replies; set on gateway and worker.")


class GatewaySettings(BaseModel):
    """``sift gateway``'s work stream."""

    request_timeout_s: float = setting(60.0, "Longest wait for a worker's reply.", gt=0)
    stream_max_msgs: int = setting(100_000, "Work stream limit, all models.", ge=1)
    stream_max_bytes: int = setting(1 << 30, "Work stream limit in bytes.", ge=1)
    stream_max_msgs_per_model: int = setting(10_000, "Messages queued per model.", ge=1)
    stream_storage: Literal["file", "memory"] = setting("file", "Work stream storage.")


class WorkerSettings(BaseModel):
    """``sift worker``'s pull from the work stream."""

    max_inflight: int | None = setting(
        None, "Messages held per model at once (default: 2 x the batch request cap, at most 64).", ge=1
    )
    ack_wait_s: float = setting(3.0, "Redeliver a message unacknowledged this long (a dead worker's come back).", gt=0)
    progress_interval_s: float = setting(1.0, "Extend the ack wait of held messages this often (0: off).", ge=0)
    worker_id: str = setting("", "Name in heartbeats and the X-Sift-Worker header (default host-pid).")


GROUPS: dict[str, type[BaseModel]] = {
    "server": ServerSettings,
    "frontends": FrontendSettings,
    "process": ProcessSettings,
    "models": ModelSettings,
    "limits": LimitsSettings,
    "engine": EngineSettings,
    "memory": MemorySettings,
    "heap": HeapSettings,
    "cluster": ClusterSettings,
    "gateway": GatewaySettings,
    "worker": WorkerSettings,
}


class Settings(
    ServerSettings,
    FrontendSettings,
    ProcessSettings,
    ModelSettings,
    LimitsSettings,
    EngineSettings,
    MemorySettings,
    HeapSettings,
    ClusterSettings,
    GatewaySettings,
    WorkerSettings,
    BaseSettings,
):
    """Every group's settings: ``SIFT_<NAME>`` variables, keyword arguments (the flags) on top."""

    # An empty variable counts as unset (SIFT_BACKEND= leaves each entry's own backend).
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)


def variable(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def flag(group: type[BaseModel], name: str) -> str:
    extra = group.model_fields[name].json_schema_extra
    named = extra.get("flag") if isinstance(extra, dict) else None
    return str(named) if named else "--" + name.replace("_", "-")
