"""The vocabulary of backends: which (backend, precision) pairs exist, what a
catalog entry asks for (:class:`BackendRequest`) and what that leaves ``auto``
to choose from."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sift_server.adapters.base import LoadContext

BackendName = Literal["auto", "torch", "onnx", "openvino"]
PrecisionName = Literal["fp32", "bf16", "fp16", "int8"]
# Where a forward can run: every backend name but ``auto``, which chooses among them.
RuntimeName = Literal["torch", "onnx", "openvino"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "onnx", "openvino")
RUNTIMES: tuple[str, ...] = ("torch", "onnx", "openvino")
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "int8")
# Which (backend, precision) pairs exist at all; int8 is never chosen by auto.
SUPPORTED: frozenset[tuple[str, str]] = frozenset(
    {
        ("torch", "fp32"),
        ("torch", "bf16"),
        ("torch", "fp16"),
        ("onnx", "fp32"),
        ("onnx", "int8"),
        ("openvino", "fp32"),
        ("openvino", "bf16"),
    }
)
# The library each non-torch backend needs.
LIBRARY = {"onnx": "onnxruntime", "openvino": "openvino"}


@dataclass(frozen=True, slots=True)
class Choice:
    backend: str
    precision: str

    def __str__(self) -> str:
        return f"{self.backend}/{self.precision}"


REFERENCE = Choice("torch", "fp32")


@dataclass(frozen=True, slots=True)
class BackendRequest:
    """What the catalog entry (or the ``SIFT_BACKEND`` override) asks for."""

    backend: str = "torch"
    precision: str | None = None
    tolerance: float | None = None
    cache_dir: Path | None = None
    threads: int = 1
    device: str = "cpu"
    # Decide again instead of loading a recorded auto decision (once per decision
    # and process: see ``choose``).
    rechoose: bool = False
    # Open the recorded decision or raise ``choice.NotDecided`` (no export, no timing).
    recorded_only: bool = False

    def __post_init__(self) -> None:
        check_pair(self.backend, self.precision)
        if self.device.startswith("cuda") and self.backend in ("onnx", "openvino"):
            raise ValueError(f"backend {self.backend} runs on the CPU here; use torch (or auto) on a GPU")


def check_pair(backend: str, precision: str | None) -> None:
    """Raise ValueError unless ``backend`` (or ``auto``) can run ``precision`` (or
    any): the one rule the catalog and every request follow."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "int8" and backend == "auto":
        raise ValueError("int8 is never chosen automatically: name the backend (onnx) with precision int8")
    if backend != "auto" and precision is not None and (backend, precision) not in SUPPORTED:
        raise ValueError(f"backend {backend} does not run precision {precision}")


def candidates(request: BackendRequest) -> list[Choice]:
    """What ``request`` leaves to choose from, in ``auto``'s order of preference
    among equally fast candidates: the reference (torch fp32) first, then the
    other fp32 runtimes, then reduced precisions."""
    if request.device.startswith("cuda"):
        pool = [REFERENCE, Choice("torch", "fp16"), Choice("torch", "bf16")]
    else:
        pool = [REFERENCE, Choice("onnx", "fp32"), Choice("openvino", "fp32"), Choice("openvino", "bf16")]
        pool.append(Choice("torch", "bf16"))
    if request.backend != "auto":
        pool = [c for c in pool if c.backend == request.backend]
    if request.precision is not None:
        pool = [c for c in pool if c.precision == request.precision]
        if not pool and request.backend != "auto":
            pool = [Choice(request.backend, request.precision)]  # int8: opt-in only
    if not pool:
        raise ValueError(f"no backend matches backend={request.backend} precision={request.precision}")
    return pool


def is_explicit(request: BackendRequest) -> bool:
    """Both named: run that, without probing or timing."""
    return request.backend != "auto" and request.precision is not None


def available(choice: Choice) -> bool:
    library = LIBRARY.get(choice.backend)
    return library is None or importlib.util.find_spec(library) is not None


def request_for(
    ctx: LoadContext, device: str, *, backend: str | None = None, precision: str | None = None
) -> BackendRequest:
    """The request a load context makes for ``device``; a ``backend`` given
    replaces the entry's backend and precision (an adapter that narrowed them)."""
    return BackendRequest(
        backend=ctx.backend if backend is None else backend,
        precision=ctx.precision if backend is None else precision,
        tolerance=ctx.tolerance,
        cache_dir=ctx.cache_dir,
        threads=ctx.torch_threads,
        rechoose=ctx.rechoose_backend,
        recorded_only=ctx.recorded_only,
        device=device,
    )
