"""Closed-loop clients for the queue's fault runs (NATS restarted, a worker
OOM-killed): each client sends one request at a time through the gateway and,
when answered 503 with Retry-After, waits as told and sends it again, until it
is answered 200. Every attempt carries its own X-Request-ID, which the answer
must echo (an answer meant for another request would show here).

Shared by tests/cluster/test_queue_faults.py and probes/queue_faults.py: the
figures (sent, answered, lost, 503s, answered wrongly, max latency) are counted
the same way in both."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# A request not answered 200 within this (retries included) counts as lost.
GIVE_UP_S = 60.0


@dataclass(slots=True)
class Attempt:
    request: int  # the logical request (its retries share it)
    sent: float
    answered: float
    status: int  # 0: no HTTP answer (transport error)
    retry_after: str | None = None
    code: str | None = None  # the envelope's detail.code of an error
    echoed_right: bool = True  # the answer's X-Request-ID is the attempt's
    error: str = ""


@dataclass
class Figures:
    requests: int  # logical requests started
    attempts: int  # HTTP requests sent (retries included)
    answered: int  # logical requests answered 200
    lost: int  # logical requests never answered 200 (transport error or given up)
    retryable_503: int  # 503s with Retry-After and the contract's envelope
    bad: list[Attempt]  # anything else: another status, a 503 without Retry-After or envelope, no answer
    wrong_answers: int  # 200s whose X-Request-ID is not their request's (an answer meant for another)
    max_attempt_s: float  # the slowest single HTTP request
    max_request_s: float  # the slowest logical request, first send to its 200 (retries included)

    def line(self) -> str:
        return (
            f"requests {self.requests}, HTTP requests {self.attempts}, answered {self.answered}, lost {self.lost}, "
            f"503 with Retry-After {self.retryable_503}, other failures {len(self.bad)}, "
            f"answered wrongly {self.wrong_answers}, max latency {self.max_attempt_s:.2f} s per HTTP request, "
            f"{self.max_request_s:.2f} s per request with its retries"
        )


def _retryable(attempt: Attempt) -> bool:
    """A 503 in the contract's envelope that says when to come back."""
    return attempt.status == 503 and attempt.retry_after is not None and bool(attempt.code)


@dataclass
class ClosedLoop:
    """``clients`` threads posting one-item encodes of ``model`` to ``url``."""

    url: str
    model: str
    clients: int
    attempts: list[Attempt] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)
    done: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for index in range(self.clients):
            thread = threading.Thread(target=self._client, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> Figures:
        """Stop sending new requests; each client finishes the one it has (retries included)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(GIVE_UP_S + 10)
        return self.figures()

    def answered_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for a in self.attempts if a.status == 200 and a.sent > moment)

    def _client(self, index: int) -> None:
        with httpx.Client(timeout=GIVE_UP_S) as http:
            while not self._stop.is_set():
                request = next(self._ids)
                first = time.monotonic()
                with self._lock:
                    self.started[request] = first
                while time.monotonic() - first < GIVE_UP_S:
                    attempt = self._send(http, request, index)
                    with self._lock:
                        self.attempts.append(attempt)
                    if attempt.status == 200:
                        with self._lock:
                            self.done[request] = attempt.answered
                        break
                    if attempt.status != 503 or attempt.retry_after is None:
                        break  # not retryable: counted among the failures
                    time.sleep(float(attempt.retry_after))

    def _send(self, http: httpx.Client, request: int, index: int) -> Attempt:
        attempt_id = uuid.uuid4().hex
        sent = time.monotonic()
        try:
            response = http.post(
                f"{self.url}/v1/encode/{self.model}",
                json={"items": [{"text": f"client {index} request {request}"}]},
                headers={"Accept": "application/json", "X-Request-ID": attempt_id},
            )
        except httpx.HTTPError as exc:
            return Attempt(request, sent, time.monotonic(), 0, error=repr(exc))
        answered = time.monotonic()
        echoed = response.headers.get("x-request-id") == attempt_id
        if response.status_code == 200:
            return Attempt(request, sent, answered, 200, echoed_right=echoed)
        code = None
        try:
            detail = response.json().get("detail")
            code = detail.get("code") if isinstance(detail, dict) else None
        except ValueError:
            pass
        return Attempt(
            request,
            sent,
            answered,
            response.status_code,
            response.headers.get("retry-after"),
            code,
            echoed,
            response.text[:300],
        )

    def figures(self) -> Figures:
        with self._lock:
            attempts = list(self.attempts)
            started, done = dict(self.started), dict(self.done)
        retryable = [a for a in attempts if _retryable(a)]
        bad = [a for a in attempts if a.status != 200 and not _retryable(a)]
        return Figures(
            requests=len(started),
            attempts=len(attempts),
            answered=len(done),
            lost=len(started) - len(done),
            retryable_503=len(retryable),
            bad=bad,
            wrong_answers=sum(1 for a in attempts if a.status == 200 and not a.echoed_right),
            max_attempt_s=max((a.answered - a.sent for a in attempts), default=0.0),
            max_request_s=max((done[r] - started[r] for r in done), default=0.0),
        )


class MemoryCgroup:
    """A memory cgroup with a limit: the kernel's OOM killer ends a process in it that
    outgrows the limit (SIGKILL, as on a node out of memory or a pod past its limit).
    cgroup v1 (``/sys/fs/cgroup/memory``) or v2 with the memory controller; needs the
    right to create one (root), else ``create`` returns None."""

    def __init__(self, folder: Path, version: int) -> None:
        self.folder = folder
        self.version = version

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> MemoryCgroup | None:
        for root, version in ((Path("/sys/fs/cgroup/memory"), 1), (Path("/sys/fs/cgroup"), 2)):
            if version == 2 and "memory" not in _read(root / "cgroup.subtree_control").split():
                continue
            folder = root / name
            try:
                folder.mkdir(exist_ok=True)
                group = cls(folder, version)
                group._limit(limit_bytes)
                return group
            except OSError:
                with contextlib.suppress(OSError):
                    folder.rmdir()
        return None

    def _limit(self, limit_bytes: int) -> None:
        if self.version == 1:
            (self.folder / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = self.folder / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no swapping out instead of the kill
                swap.write_text(str(limit_bytes))
        else:
            (self.folder / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (self.folder / "memory.swap.max").write_text("0")

    def add(self, pid: int) -> None:
        (self.folder / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this group."""
        events = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in _read(self.folder / events).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
