"""The HTTP layer: routes, negotiation, auth, errors. Nothing below it knows about HTTP."""
