"""Secrets the operator keeps in the environment under a name they choose (a remote
model's upstream key: the catalog names the variable, never the value). Read here,
at the moment of use, so a rotated key needs no restart and the value is held by
nobody between requests."""

from __future__ import annotations

import os


def environment_secret(variable: str) -> str | None:
    """The variable's value without surrounding whitespace (a secret file's trailing
    newline), or None when it is unset or empty."""
    value = os.environ.get(variable, "").strip()
    return value or None
