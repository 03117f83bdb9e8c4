"""Where an adapter's forward runs: PyTorch, ONNX Runtime or OpenVINO, and at
which precision; ``auto`` picks, on this machine, the fastest one whose outputs
on a fixed probe set match PyTorch fp32 within the entry's tolerance.

Adapters describe their network as a :class:`Graph` (int64 ``(batch, seq)``
inputs in a fixed order, one float output) and get back a :class:`Runner`: a
callable from numpy inputs to a numpy output. Nothing outside the adapters
knows a backend exists.

Threads: every backend is told its thread count explicitly (the cores in the
process's CPU affinity unless the server says otherwise). ONNX Runtime would
otherwise size its pool by the machine and ignore ``taskset``.
"""

from __future__ import annotations

import abc
import datetime
import functools
import importlib.util
import logging
import platform
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from sift_server.adapters import _artifacts as artifacts

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BackendName = Literal["auto", "torch", "onnx", "openvino"]
PrecisionName = Literal["fp32", "bf16", "fp16", "int8"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "onnx", "openvino")
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
_LIBRARY = {"onnx": "onnxruntime", "openvino": "openvino"}
# OpenVINO's CPU plugin keeps compiled kernels per input shape, about 2.7 MB each for
# MiniLM, in a cache of 5,000 entries by default: with served batches of every
# (rows, length) that grew RSS by ~3 MB a request for hours. 128 shapes bound it to a
# few hundred MB and cost nothing measurable on repeated shapes (probes/soak.py).
OPENVINO_SHAPE_CACHE = 128
PROBE_VERSION = "1"
# auto times the candidates that pass in rounds, each round running every one of
# them once on the probe set, and compares their medians (see ``pick``). Five
# rounds: the median then ignores up to two disturbed samples per candidate, for
# about two more probe-set forwards per candidate than the three sequential
# repeats this replaced.
TIMING_ROUNDS = 5
# Candidates whose medians are within this fraction of the fastest count as equally
# fast; the first of them in ``candidates()``' order wins (see ``pick``).
NEAR_MARGIN = 0.05
# Part of a decision's key: changing how auto measures or decides redoes recorded
# decisions once (those of the sequential single timing could be an unlucky draw).
TIMING_METHOD = f"interleaved-median:{TIMING_ROUNDS}:{NEAR_MARGIN}"
# Decisions this process made afresh because it was asked to (``rechoose``), as
# (cache folder, decision key): a model evicted and loaded again later reuses the
# decision this process just recorded instead of timing on every reload.
_REDECIDED: set[tuple[str, str]] = set()


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

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.backend != "auto" and self.precision is not None and (self.backend, self.precision) not in SUPPORTED:
            raise ValueError(f"backend {self.backend} does not run precision {self.precision}")
        if self.precision == "int8" and self.backend == "auto":
            raise ValueError("int8 is never chosen automatically: name the backend (onnx) with precision int8")
        if self.device.startswith("cuda") and self.backend in ("onnx", "openvino"):
            raise ValueError(f"backend {self.backend} runs on the CPU here; use torch (or auto) on a GPU")


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
    library = _LIBRARY.get(choice.backend)
    return library is None or importlib.util.find_spec(library) is not None


# ---- the network an adapter runs ---------------------------------------------


class Graph(abc.ABC):
    """An adapter's network: ``module()`` is a torch module taking the int64
    ``inputs`` positionally and returning the float ``output`` tensor."""

    kind: str
    inputs: tuple[str, ...]
    output: str

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._module: torch.nn.Module | None = None

    @abc.abstractmethod
    def build_module(self) -> torch.nn.Module: ...

    def module(self) -> torch.nn.Module:
        """The fp32 CPU module, built once (export and the reference share it)."""
        if self._module is None:
            self._module = self.build_module().eval()
        return self._module

    def release(self) -> None:
        """Forget the torch module (after a non-torch backend won)."""
        self._module = None

    # Export hooks: the defaults export ``module()`` with torch.onnx; a graph whose
    # library exports itself (GLiNER) overrides them.

    def export_onnx(self, dest: Path) -> None:
        """Write ``dest/model.onnx`` and whatever else loading it needs."""
        _export_onnx(self, dest)

    def companions(self, exported: Path, dest: Path) -> None:  # noqa: B027 - optional
        """Copy into a derived artifact (int8 graph, OpenVINO IR) what loading it
        needs besides the graph, from the fp32 ONNX folder ``exported``."""

    def key_parts(self) -> dict[str, Any]:
        """What an export depends on besides the weights, the inputs and ``LIBRARIES``."""
        return {}


# ---- runners -------------------------------------------------------------------


class Backend(abc.ABC):
    """What ``auto`` opens, checks, times and keeps: a :class:`Runner` for the
    adapters whose network is a :class:`Graph`, or an adapter's own wrapper where
    a library runs the backend itself (GLiNER's runtime models)."""

    choice: Choice
    # What actually runs (OpenVINO may ignore a bf16 hint on a CPU without bf16).
    effective_precision: str

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def describe(self) -> dict[str, Any]:
        return {"backend": self.choice.backend, "precision": self.effective_precision}


class Runner(Backend):
    @abc.abstractmethod
    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray: ...


class TorchRunner(Runner):
    def __init__(self, graph: Graph, choice: Choice, device: str, threads: int) -> None:
        import torch

        from sift_server.adapters._torch_runtime import configure_threads, module_bytes

        configure_threads(threads)
        module = graph.module()
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
        if dtype != torch.float32 or device != "cpu":
            import copy

            module = copy.deepcopy(module).to(device=device, dtype=dtype)
        self.module = module
        self.device = torch.device(device)
        self.choice = choice
        self.effective_precision = choice.precision
        self.inputs = graph.inputs
        self._bytes = module_bytes(module)

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feed[name])).to(self.device) for name in self.inputs]
        with torch.inference_mode():
            out = self.module(*args)
        result: np.ndarray = out.float().cpu().numpy()
        return result

    def base_model(self) -> torch.nn.Module:
        """The Hugging Face model inside the graph's wrapper (where LoRA layers go)."""
        import torch

        inner = getattr(self.module, "model", self.module)
        assert isinstance(inner, torch.nn.Module)
        return inner

    def memory_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        import torch

        self.module.to("meta")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def onnx_session_options(threads: int) -> Any:
    """ONNX Runtime settings of every Sift session: ``threads`` intra-op threads, one inter-op."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # Told explicitly: left alone, ONNX Runtime sizes its pool by the machine, not the affinity.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # The event loop shares these cores: idle pool threads must sleep, not spin.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


class OnnxRunner(Runner):
    def __init__(self, path: Path, choice: Choice, threads: int) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(
            str(path), onnx_session_options(threads), providers=["CPUExecutionProvider"]
        )
        self.names = [i.name for i in self.session.get_inputs()]
        self.choice = choice
        self.effective_precision = choice.precision
        self._bytes = path.stat().st_size
        self.threads = threads

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        result: np.ndarray = self.session.run(None, {name: feed[name] for name in self.names})[0]
        return result

    def memory_bytes(self) -> int:
        return self._bytes

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "intra_op_threads": self.threads, "inter_op_threads": 1}


def openvino_module() -> Any:
    """``import openvino``, then stop the thread pool its telemetry starts on import:
    a server sends nothing anywhere, and a lingering non-daemon thread would hold
    the process at exit."""
    import openvino as ov

    try:
        from openvino_telemetry.main import Telemetry
    except ImportError:
        return ov
    instance = getattr(Telemetry, "_SingletonMetaClass__single_instance", None)
    executor = getattr(getattr(instance, "sender", None), "executor", None)
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
    return ov


def openvino_config(threads: int, precision: str) -> dict[str, Any]:
    """OpenVINO CPU compile settings of every Sift model: ``threads`` inference
    threads in one stream, the precision as a hint, a bounded shape cache."""
    return {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[precision],
        "CPU_RUNTIME_CACHE_CAPACITY": OPENVINO_SHAPE_CACHE,
    }


def openvino_precision(compiled: Any) -> str:
    """The precision a compiled model really runs at (the hint is only a request)."""
    hint_type = compiled.get_property("INFERENCE_PRECISION_HINT")
    actual = str(hint_type.get_type_name()) if hasattr(hint_type, "get_type_name") else str(hint_type)
    return {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}.get(actual, actual)


class OpenVinoRunner(Runner):
    def __init__(self, xml: Path, choice: Choice, threads: int) -> None:
        ov = openvino_module()

        config = openvino_config(threads, choice.precision)
        self.config = config
        self.compiled = ov.Core().compile_model(str(xml), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.names = [port.get_any_name() for port in self.compiled.inputs]
        self.choice = choice
        self.effective_precision = openvino_precision(self.compiled)
        self.threads = threads
        self._bytes = sum(p.stat().st_size for p in xml.parent.glob("model.*"))

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        outputs = self.request.infer({name: feed[name] for name in self.names})
        # The request reuses its output buffer on the next call: copy.
        return np.array(outputs[0], dtype=np.float32, copy=True)

    def memory_bytes(self) -> int:
        return self._bytes

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "inference_num_threads": self.threads}


# ---- export ------------------------------------------------------------------


def _export_onnx(graph: Graph, dest: Path) -> None:
    import torch

    module = graph.module()
    example = tuple(torch.ones((2, 8), dtype=torch.long) for _ in graph.inputs)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    # The exporter's graph passes log every rewrite at INFO: keep the server log readable.
    quiet = [logging.getLogger(name) for name in ("onnx_ir", "onnxscript", "torch.onnx", "torch.export")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        _torch_onnx_export(graph, module, example, batch, seq, dest)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


def _torch_onnx_export(graph: Graph, module: Any, example: Any, batch: Any, seq: Any, dest: Path) -> None:
    import torch

    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            module,
            example,
            str(dest / "model.onnx"),
            input_names=list(graph.inputs),
            output_names=[graph.output],
            dynamic_shapes=_dynamic_shapes(module, len(graph.inputs), {0: batch, 1: seq}),
            dynamo=True,
            external_data=False,
            verbose=False,
        )


def _dynamic_shapes(module: Any, count: int, axes: dict[int, Any]) -> tuple[Any, ...]:
    """One ``axes`` per input; a ``forward(*tensors)`` takes them as one nested tuple."""
    import inspect

    shapes = tuple(axes for _ in range(count))
    parameters = inspect.signature(module.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return (shapes,)
    return shapes


def _quantize_int8(source: Path, dest: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The exporter's intermediate shape annotations can disagree with the quantizer's own
    # shape inference (a cross-encoder's head): drop them and let it infer afresh.
    model = onnx.load(str(source / "model.onnx"))
    del model.graph.value_info[:]
    plain = dest / "plain.onnx.tmp"
    onnx.save(model, str(plain))
    try:
        quantize_dynamic(str(plain), str(dest / "model.onnx"), weight_type=QuantType.QInt8)
    finally:
        plain.unlink(missing_ok=True)


def _convert_openvino(source: Path, dest: Path) -> None:
    ov = openvino_module()

    ov.save_model(ov.convert_model(str(source / "model.onnx")), str(dest / "model.xml"), compress_to_fp16=False)


@dataclass(slots=True)
class Artifacts:
    """Exports of one graph into one cache folder, keyed by content and versions."""

    graph: Graph
    cache: Path
    model_hash: str
    versions: Mapping[str, str] = field(default_factory=artifacts.library_versions)

    def _parts(self, backend: str, precision: str) -> dict[str, Any]:
        return {
            "model": self.model_hash,
            "graph": self.graph.kind,
            "inputs": list(self.graph.inputs),
            "backend": backend,
            "precision": precision,
            "versions": dict(self.versions),
            **self.graph.key_parts(),
        }

    def onnx(self, precision: str = "fp32") -> Path:
        what = f"{self.graph.kind} {self.graph.folder.name} onnx/{precision}"
        fp32 = artifacts.ensure_artifact(self.cache, "onnx", self._parts("onnx", "fp32"), self.graph.export_onnx, what)
        if precision == "fp32":
            return fp32

        def quantize(dest: Path) -> None:
            _quantize_int8(fp32, dest)
            self.graph.companions(fp32, dest)

        return artifacts.ensure_artifact(self.cache, "onnx", self._parts("onnx", precision), quantize, what)

    def openvino(self) -> Path:
        # One fp32 IR serves every precision: OpenVINO's precision is a compile-time hint.
        # The ONNX graph it is converted from is only needed (and checked) when the IR is missing.
        what = f"{self.graph.kind} {self.graph.folder.name} openvino IR"
        return artifacts.ensure_artifact(
            self.cache,
            "openvino",
            self._parts("openvino", "fp32"),
            self._convert_openvino,
            what,
        )

    def _convert_openvino(self, dest: Path) -> None:
        exported = self.onnx("fp32")
        _convert_openvino(exported, dest)
        self.graph.companions(exported, dest)


def open_runner(graph: Graph, choice: Choice, request: BackendRequest, store: Artifacts | None) -> Runner:
    if choice.backend == "torch":
        return TorchRunner(graph, choice, request.device, request.threads)
    assert store is not None
    if choice.backend == "onnx":
        return OnnxRunner(store.onnx(choice.precision) / "model.onnx", choice, request.threads)
    if choice.backend == "openvino":
        return OpenVinoRunner(store.openvino() / "model.xml", choice, request.threads)
    raise ValueError(f"unknown backend {choice.backend!r}")


# ---- choosing ------------------------------------------------------------------
#
# A functional core and a thin shell: ``timing_order`` and ``pick`` are pure
# functions of their arguments (what order a round runs in; which candidate the
# measured samples choose), ``time_rounds`` only runs forwards and reads the
# clock, and ``choose``/``_decide`` open runners and record the result.


Evaluate = Callable[[Runner], np.ndarray]
Agree = Callable[[np.ndarray, np.ndarray], tuple[bool, float]]
# Seconds from an arbitrary origin; injected so tests can script what timing sees.
Clock = Callable[[], float]
T = TypeVar("T")
# What a ``choose_backend`` caller opens (a Runner, or its own Backend) and what its
# probe evaluation returns (an array, or e.g. GLiNER's entity spans).
B = TypeVar("B", bound=Backend)
Out = TypeVar("Out")


def timing_order(items: Sequence[T], round_index: int) -> list[T]:
    """Round ``round_index``'s order: rotated by one each round, so no candidate
    always runs first (after the probe inputs were built) or always right after
    the same other runtime (whose caches it then finds cold)."""
    if not items:
        return []
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``pick`` chose from the samples, and why."""

    choice: Choice
    fastest: Choice  # the lowest median; ``choice`` differs only within the margin
    medians: Mapping[Choice, float]


def pick(samples: Mapping[Choice, Sequence[float]], preference: Sequence[Choice], margin: float) -> Verdict:
    """The candidate the timing samples choose: the first in ``preference``
    whose median is within ``margin`` (a fraction) of the lowest median.

    The median, not the minimum: interference on a shared machine only ever adds
    time, so the minimum would also ignore it, but it is one sample, and a runtime
    whose forwards vary (thread wake-ups, allocator) can post a lucky one that its
    served forwards will not match; the median is the forward time it typically
    gives and, over interleaved rounds, ignores the few samples a stall disturbs.
    The margin: candidates this close are equally fast as far as a few rounds on
    a noisy machine can tell, and always taking the preferred one keeps noise from
    flipping the recorded choice between them from one decision to the next."""
    if not samples:
        raise ValueError("nothing was timed")
    rank = {choice: index for index, choice in enumerate(preference)}
    medians = {choice: float(statistics.median(values)) for choice, values in samples.items()}
    fastest = min(medians, key=lambda c: (medians[c], rank[c]))
    bar = medians[fastest] * (1.0 + margin)
    choice = min((c for c in medians if medians[c] <= bar), key=lambda c: rank[c])
    return Verdict(choice=choice, fastest=fastest, medians=medians)


def time_rounds(
    runners: Sequence[B], evaluate: Callable[[B], object], rounds: int, clock: Clock
) -> dict[Choice, list[float]]:
    """Seconds of each runner's ``evaluate``, ``rounds`` samples each, interleaved:
    every round runs every runner once (in ``timing_order``), so a stretch when
    another process holds the core costs each candidate a sample or two rather
    than one candidate all of its samples."""
    samples: dict[Choice, list[float]] = {runner.choice: [] for runner in runners}
    for index in range(rounds):
        for runner in timing_order(runners, index):
            start = clock()
            evaluate(runner)
            samples[runner.choice].append(clock() - start)
    return samples


def summary(kind: str, choice: Choice, measured: Mapping[str, Any], timing: Mapping[str, Any]) -> str:
    """One log line: what runs and the figures it was chosen by. Tolerates any
    shape of ``measured`` (a recorded decision file is read back, not trusted)."""
    entries = {name: entry for name, entry in measured.items() if isinstance(entry, Mapping)}
    timed = sorted(
        ((name, float(entry["seconds"])) for name, entry in entries.items() if isinstance(entry.get("seconds"), float)),
        key=lambda item: item[1],
    )
    missed = [
        f"{name} {entry['agreement']:.6f}"
        if isinstance(entry.get("agreement"), float)
        else f"{name} ({entry.get('note') or 'could not be opened'})"
        for name, entry in entries.items()
        if not entry.get("passed")
    ]
    if timed:
        figures = ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in timed)
        text = f"{kind}: backend {choice} (median of {timing.get('rounds', '?')} interleaved rounds: {figures})"
    else:
        text = f"{kind}: backend {choice} (the only candidate within tolerance: not timed)"
    fastest = timing.get("fastest")
    if fastest and fastest != str(choice):
        text += f"; preferred to {fastest}, within {float(timing.get('margin', NEAR_MARGIN)):.0%} of it"
    if missed:
        text += f"; not within tolerance {timing.get('tolerance', '?')}: {', '.join(missed)}"
    return text


@functools.cache
def _cpu_signature() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("model name", "flags")):
                    flags += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return f"{platform.machine()}:{platform.processor()}:{artifacts.artifact_key({'cpu': flags})}"


def choose(
    graph: Graph,
    request: BackendRequest,
    evaluate: Evaluate,
    agree: Agree,
    tolerance: float,
    probe_key: str = "",
    clock: Clock = time.perf_counter,
) -> tuple[Runner, dict[str, Any]]:
    """Open the runner the request names, or the fastest that agrees with torch fp32.

    ``probe_key`` names whatever else shapes ``evaluate``'s outputs (pooling,
    length limit): a recorded decision holds only for the same. Returns the
    runner and a description for ``/v1/models`` (backend, precision, how it was
    chosen and, for ``auto``, what each candidate measured)."""
    return choose_backend(graph, request, evaluate, agree, tolerance, _open_runner, probe_key=probe_key, clock=clock)


def _open_runner(graph: Graph, choice: Choice, request: BackendRequest, store: Artifacts | None) -> Runner:
    # Looked up when called, not bound once: tests replace ``open_runner``.
    return open_runner(graph, choice, request, store)


def choose_backend(
    graph: Graph,
    request: BackendRequest,
    evaluate: Callable[[B], Out],
    agree: Callable[[Out, Out], tuple[bool, float]],
    tolerance: float,
    opener: Callable[[Graph, Choice, BackendRequest, Artifacts | None], B],
    *,
    supported: Collection[Choice] | None = None,
    probe_key: str = "",
    clock: Clock = time.perf_counter,
) -> tuple[B, dict[str, Any]]:
    """``choose`` for any kind of :class:`Backend`: ``opener`` opens a choice
    (exports through the store it is given), ``evaluate`` runs the probe set on
    what it opened and ``agree`` compares that with torch fp32's. ``supported``
    narrows the candidates to what the adapter can run at all."""
    pool = [c for c in candidates(request) if available(c) and (supported is None or c in supported)]
    if not pool:
        if supported is not None and not any(c in supported for c in candidates(request)):
            raise ValueError(f"{graph.kind} does not run backend {request.backend} precision {request.precision}")
        raise ImportError(f"backend {request.backend} needs {_LIBRARY.get(request.backend)}, which is not installed")
    needs_store = any(c.backend != "torch" for c in pool)
    store: Artifacts | None = None
    cache: Path | None = None
    if needs_store:
        cache = artifacts.usable_cache_dir(request.cache_dir)
        store = Artifacts(graph, cache, artifacts.content_hash(graph.folder, cache))
    if is_explicit(request) or len(pool) == 1:
        runner = opener(graph, pool[0], request, store)
        _drop_reference(graph, runner)
        return runner, {**runner.describe(), "selected_by": "catalog"}

    model_hash = store.model_hash if store is not None else artifacts.content_hash(graph.folder)
    decision_key = artifacts.artifact_key(
        {
            "model": model_hash,
            "graph": graph.kind,
            "candidates": [str(c) for c in pool],
            "threads": request.threads,
            "device": request.device,
            "cpu": _cpu_signature(),
            "tolerance": tolerance,
            "probe": f"{PROBE_VERSION}:{probe_key}",
            "timing": TIMING_METHOD,
            "versions": artifacts.library_versions(),
        }
    )
    decisions = cache if cache is not None else artifacts.usable_cache_dir(request.cache_dir)
    cached = artifacts.read_decision(decisions, decision_key)
    redecide = (str(decisions), decision_key)
    if cached is not None and request.rechoose and redecide not in _REDECIDED:
        log.info("%s: deciding again as asked (recorded: %s)", graph.kind, cached.get("choice"))
        cached = None
    if cached is not None:
        known = {str(c): c for c in pool}
        choice = known.get(str(cached.get("choice")))
        if choice is not None:
            try:
                runner = opener(graph, choice, request, store)
            except Exception as exc:  # fall back to deciding again
                log.warning("%s: the recorded choice %s failed to open (%s); deciding again", graph.kind, choice, exc)
            else:
                _drop_reference(graph, runner)
                measured = cached.get("measured")
                measured = measured if isinstance(measured, dict) else {}
                timing = cached.get("timing")
                timing = timing if isinstance(timing, dict) else {}
                decided_at = cached.get("decided_at")
                log.info(
                    "%s; decided %s (SIFT_RECHOOSE_BACKEND=1 decides again)",
                    summary(graph.kind, choice, measured, timing),
                    decided_at or "earlier",
                )
                return runner, {
                    **runner.describe(),
                    "selected_by": "auto (recorded)",
                    "measured": measured,
                    "timing": timing,
                    "decided_at": decided_at,
                }

    runner, measured, timing = _decide(graph, request, pool, store, evaluate, agree, tolerance, clock, opener)
    # Wall-clock date for the operator reading /v1/models; the choice never depends on it.
    decided_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record = {"choice": str(runner.choice), "measured": measured, "timing": timing, "decided_at": decided_at}
    artifacts.write_decision(decisions, decision_key, record)
    if request.rechoose:
        _REDECIDED.add(redecide)
    _drop_reference(graph, runner)
    return runner, {
        **runner.describe(),
        "selected_by": "auto",
        "measured": measured,
        "timing": timing,
        "decided_at": decided_at,
    }


def _decide(
    graph: Graph,
    request: BackendRequest,
    pool: Sequence[Choice],
    store: Artifacts | None,
    evaluate: Callable[[B], Out],
    agree: Callable[[Out, Out], tuple[bool, float]],
    tolerance: float,
    clock: Clock,
    opener: Callable[[Graph, Choice, BackendRequest, Artifacts | None], B],
) -> tuple[B, dict[str, Any], dict[str, Any]]:
    """Open every candidate, keep those within tolerance, time them in
    interleaved rounds and ``pick``; returns the chosen runner (the others
    closed), what each candidate measured, and how the timing was done."""
    log.info("%s: choosing a backend among %s (tolerance %g)", graph.kind, ", ".join(map(str, pool)), tolerance)
    reference = opener(graph, REFERENCE, request, store)
    # The reference outputs; this forward, like each candidate's agreement check
    # below, also warms its runner (first-call allocations, per-shape kernels)
    # before any timed sample.
    expected = evaluate(reference)
    passing: list[B] = [reference]
    # The reference against itself, on the rule's own scale (a cosine's 1.0, a difference's 0.0).
    _, itself = agree(expected, expected)
    measured: dict[str, Any] = {str(REFERENCE): {"agreement": round(float(itself), 8), "passed": True}}
    for choice in pool:
        if choice == REFERENCE:
            continue
        try:
            runner = opener(graph, choice, request, store)
        except Exception as exc:  # one backend failing must not stop the load
            log.warning("%s: backend %s could not be opened: %s", graph.kind, choice, exc)
            measured[str(choice)] = {"error": f"{type(exc).__name__}: {exc}"[:300], "passed": False}
            continue
        if runner.effective_precision != choice.precision:
            # e.g. OpenVINO on a CPU without bf16: the same as a candidate already measured.
            measured[str(choice)] = {"passed": False, "note": f"runs as {runner.effective_precision}"}
            runner.close()
            continue
        ok, agreement = agree(evaluate(runner), expected)
        measured[str(choice)] = {"agreement": round(float(agreement), 8), "passed": ok}
        if ok:
            passing.append(runner)
        else:
            runner.close()
    # All passing runners stay open through the rounds (that is what interleaving
    # needs): on a CPU that is up to four copies of the model at once, briefly.
    rounds = TIMING_ROUNDS if len(passing) > 1 else 0  # one candidate: nothing to compare
    samples = time_rounds(passing, evaluate, rounds, clock)
    timing: dict[str, Any] = {"rounds": rounds, "statistic": "median", "margin": NEAR_MARGIN, "tolerance": tolerance}
    if rounds:
        verdict = pick(samples, pool, NEAR_MARGIN)
        chosen = next(r for r in passing if r.choice == verdict.choice)
        timing["fastest"] = str(verdict.fastest)
        for choice, values in samples.items():
            measured[str(choice)]["seconds"] = round(verdict.medians[choice], 6)
            measured[str(choice)]["samples"] = [round(v, 6) for v in values]
    else:
        chosen = reference
    for runner in passing:
        if runner is not chosen:
            runner.close()
    log.info("%s", summary(graph.kind, chosen.choice, measured, timing))
    return chosen, measured, timing


def _drop_reference(graph: Graph, runner: Backend) -> None:
    if runner.choice.backend != "torch":
        graph.release()


# ---- tolerances ------------------------------------------------------------------

DEFAULT_COSINE = 0.9999
DEFAULT_SCORE_RELATIVE = 1e-3


def cosine_agreement(tolerance: float) -> Agree:
    """Rows agree when every row's cosine to the reference is at least ``tolerance``."""

    def agree(got: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
        a = got.astype(np.float64)
        b = expected.astype(np.float64)
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        cosines = (a * b).sum(axis=1) / np.maximum(norms, 1e-30)
        worst = float(cosines.min())
        return worst >= tolerance, worst

    return agree


def score_agreement(tolerance: float) -> Agree:
    """Scores agree when every ``|got - expected| <= tolerance * max(1, |expected|)``
    (relative to the score, absolute below 1 so logits near zero do not explode)."""

    def agree(got: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
        a = got.astype(np.float64).ravel()
        b = expected.astype(np.float64).ravel()
        worst = float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())
        return worst <= tolerance, worst

    return agree
