"""The per-model dynamic batching engine: pure queue and policy core, asyncio shell (model_engine.py)."""
