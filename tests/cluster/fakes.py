"""What a Gateway needs of the server state in unit tests: its metrics registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from sift_server.cluster.gateway_client import Gateway, GatewayOptions


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()


class _State:
    def __init__(self) -> None:
        self.metrics = _Metrics()


def bare_gateway(**options: Any) -> Gateway:
    """A gateway with no NATS connection: tests set ``nc``, ``js`` or ``kv`` on it."""
    return Gateway(GatewayOptions(**options), _State())  # type: ignore[arg-type]
