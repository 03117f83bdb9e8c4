"""Model catalog (YAML), adapter loading and the registry of loaded models."""
