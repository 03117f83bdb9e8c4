"""Refusing a model folder an adapter cannot serve exactly."""


class UnservableModel(ValueError):
    """Raised at load: the folder asks for something the adapter does not compute."""
