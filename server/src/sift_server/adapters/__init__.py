"""Model adapters: the only code that touches torch and model libraries.

Each adapter implements ``prepare`` (tokenize, cost) per request and
``forward`` per batch. Adapters are looked up by the catalog's ``adapter`` name.
"""
