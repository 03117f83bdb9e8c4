"""A stand-in for adapters/ctranslate2_convert_child.py in the conversion tests: the
real child, which first records its pid and nice in ``$CT2_PROBE_RECORD`` and, with
``$CT2_PROBE_DIE`` set, writes part of an artifact and is killed mid-conversion."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sift_server.adapters import ctranslate2_convert_child as real


def convert(source: str, destination: str, threads: int) -> None:
    record = os.environ.get("CT2_PROBE_RECORD")
    if record:
        Path(record).write_text(json.dumps({"pid": os.getpid(), "nice": os.getpriority(os.PRIO_PROCESS, 0)}))
    if os.environ.get("CT2_PROBE_DIE"):
        (Path(destination) / "model.bin").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
    real_convert(source, destination, threads)


real_convert = real.convert


def main(argv: list[str]) -> None:
    from sift_server.adapters.conversion_process import child_connections

    receive, send, config = child_connections(argv)
    real.convert = convert
    serve: Any = real.serve
    serve(receive, send, config)


if __name__ == "__main__":
    main(sys.argv)
