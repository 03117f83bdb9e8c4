"""OpenTelemetry traces (optional: the ``otel`` extra; off unless an OTLP endpoint
is configured).

* ``tracing``: the process's tracer, from the otlp_endpoint setting
  or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``; OTLP over HTTP/protobuf.
* ``asgi``: a pure-ASGI layer that opens one span per HTTP request (continuing
  the caller's W3C ``traceparent``).
* ``forwards``: an engine observer that records one span per forward, linked to
  the request spans it carried, and each request's queue wait.
* ``propagation``: inject / extract trace context into message headers (the
  gateway's NATS messages to workers).
"""
