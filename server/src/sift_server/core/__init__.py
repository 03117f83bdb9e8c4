"""The serving core: one entry from (endpoint, model, headers, body) to a typed reply,
below every transport (HTTP routes, the cluster worker)."""
