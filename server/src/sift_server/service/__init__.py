"""Use cases between the HTTP layer and the engine: validate a decoded request,
prepare it through the adapter, submit it to the model's engine, and shape the
result. Nothing here knows about HTTP or torch."""
