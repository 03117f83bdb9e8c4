"""The shared server state lives in the serving core (``core.state``); this name stays for imports."""

from sift_server.core.state import ServerState, runtime_instance_id

__all__ = ["ServerState", "runtime_instance_id"]
