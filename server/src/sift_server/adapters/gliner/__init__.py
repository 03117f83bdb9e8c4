"""The GLiNER family: the adapter (``adapter``), the library's graph on each
runtime (``graph``) and the span layer its exports run (``export``). The generic
runtime seam it builds on is ``adapters/backends/``."""
