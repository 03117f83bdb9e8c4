"""Operator probes: bounded, loopback-only checks against a real server (see README.md)."""
