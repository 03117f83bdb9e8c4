"""Sift: an inference server for embedders, rerankers and zero-shot extractors."""

__version__ = "0.1.0"

# The SIE v1 protocol version we speak; the SIE SDK 0.10.x warns on skew otherwise.
WIRE_COMPAT_VERSION = "0.10.1"
