"""Operator probes for issue 10: bounded, loopback-only checks against a real server (see README.md)."""
