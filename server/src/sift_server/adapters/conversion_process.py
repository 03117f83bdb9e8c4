"""One child process that runs a slow, GIL-holding library call, with a deadline.

The parent sends a request over a pipe and waits on it without the GIL, so the
event loop and other models' forwards keep running. A call past its deadline
kills the child (a thread could not be stopped: the work would go on in the
background), and the next call starts a fresh one. If the parent dies, the
child's pipe closes and it exits on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any


class ConversionTimeout(Exception):
    """The call ran past its deadline; the child was killed."""


class ConversionCrashed(Exception):
    """The child died during the call (out of memory, a crash in native code)."""


def child_connections(argv: list[str]) -> tuple[Connection, Connection, Any]:
    """In the child: (requests in, answers out, its configuration) from its command line."""
    read_fd, write_fd, config = int(argv[1]), int(argv[2]), json.loads(argv[3])
    return Connection(read_fd, writable=False), Connection(write_fd, readable=False), config


class ConversionProcess:
    """A child ``python -m <module> <fd in> <fd out> <json config>``: a fresh interpreter
    (not a fork of a server holding torch's and the loop's threads, and not multiprocessing's
    spawn, which re-imports the parent's main script). It answers ("ready", None) once set
    up, then (status, value) per request until its input closes."""

    def __init__(self, module: str, config: Any, start_timeout_s: float) -> None:
        self._module = module
        self._config = json.dumps(config)
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._send: Connection | None = None
        self._receive: Connection | None = None
        self.starts = 0

    def start(self) -> None:
        """Start the child and wait until it reports ready (raises if it does not)."""
        with self._lock:
            self._ensure_started()

    def _ensure_started(self) -> tuple[Connection, Connection]:
        if self._send is not None and self._receive is not None and self._alive():
            return self._send, self._receive
        self._stop_locked()
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        command = [sys.executable, "-m", self._module, str(to_child_read), str(from_child_write), self._config]
        try:
            process = subprocess.Popen(command, pass_fds=(to_child_read, from_child_write), stdin=subprocess.DEVNULL)
        finally:
            os.close(to_child_read)
            os.close(from_child_write)
        self._process = process
        self._send = Connection(to_child_write, readable=False)
        self._receive = Connection(from_child_read, writable=False)
        self.starts += 1
        if not self._receive.poll(self._start_timeout_s):
            self._stop_locked()
            raise RuntimeError(f"the conversion process did not start within {self._start_timeout_s:.0f} s")
        try:
            status, value = self._receive.recv()
        except EOFError:
            code = process.wait()
            self._stop_locked()
            raise RuntimeError(f"the conversion process exited while starting (exit code {code})") from None
        if status != "ready":
            self._stop_locked()
            raise RuntimeError(f"the conversion process failed to start: {value}")
        return self._send, self._receive

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before a start or after a stop)."""
        return self._process.pid if self._process is not None else None

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def call(self, request: Any, timeout_s: float) -> tuple[str, Any]:
        """The child's answer to ``request``; one call at a time."""
        with self._lock:
            send, receive = self._ensure_started()
            try:
                send.send(request)
                if not receive.poll(timeout_s):
                    self._stop_locked()
                    raise ConversionTimeout(f"the conversion took longer than {timeout_s:g} s")
                answer: tuple[str, Any] = receive.recv()
                return answer
            except (EOFError, BrokenPipeError, ConnectionResetError):
                code = self._process.wait() if self._process is not None else None
                self._stop_locked()
                raise ConversionCrashed(f"the conversion process died (exit code {code})") from None

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        for conn in (self._send, self._receive):
            if conn is not None:
                conn.close()
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait(5)
        self._process, self._send, self._receive = None, None, None
