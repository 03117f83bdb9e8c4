"""The GLiClass family: the adapter (``adapter``), the model's forward as a graph
on each runtime (``graph``) and the pruned forward its exports run (``export``).
The generic runtime seam it builds on is ``adapters/backends/``."""
