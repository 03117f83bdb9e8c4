"""The operator's settings: read here, once, and passed down as values.

* ``settings``: the typed groups and ``Settings``, all of them (``SIFT_*`` variables);
* ``flags``: each command's flags, made from the groups it uses, and the settings they make;
* ``effective``: every setting of a command with its value and source (``sift config``).

No other module of the server reads a ``SIFT_*`` variable or writes the
environment (tests/test_settings_reads.py checks it).
"""

from sift_server.config.settings import DEFAULT_MODEL, DEFAULT_NATS_URL, Settings

__all__ = ["DEFAULT_MODEL", "DEFAULT_NATS_URL", "Settings"]
