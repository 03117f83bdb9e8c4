"""``sift bench reference-setup``: the reference server's own virtual environment.

The release (``sie-server`` 0.10.1) asks for Python 3.12 and PyTorch < 2.10;
PyPI's builds of those are CUDA builds of gigabytes. The environment is
therefore built on this interpreter's Python with the CPU build of PyTorch the
machine has, the release and its SDK installed without their pins
(``--no-deps --ignore-requires-python``), their other requirements installed
normally under a constraint that keeps PyTorch on the CPU build, and the few
3.12-only lines rewritten (``backport``). Image and document requirements
(torchvision, timm, open-clip, docling) are left out: the bench serves text
models only, and the only torchvision build at hand does not load against the
CPU PyTorch (transformers then fails to import any model).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import venv
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sift_bench.arms.arm import REFERENCE_RELEASE
from sift_bench.arms.reference.backport import backport_tree

SDK_RELEASE = "sie-sdk==0.10.1"
# Kept on the CPU build: the versions the release's requirements would otherwise replace.
TORCH = "torch==2.13.0+cpu"
# Requirements not installed: PyTorch (pinned above), the SDK (installed by hand),
# image and document models (not served by the bench), GPU-only kernels.
_SKIPPED = ("torch", "torchvision", "timm", "open-clip-torch", "sie-sdk", "docling", "flash-attn")
# Imported at start-up by the release (its model-load errors name S3's), from the SDK's storage extra.
_EXTRA = ("boto3<2,>=1.35",)


class SetupError(RuntimeError):
    """A step of the reference environment's setup failed."""


def requirements(metadata: str) -> list[str]:
    """A wheel's unconditional requirements (``Requires-Dist`` without an extra),
    less the skipped ones."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.removeprefix("Requires-Dist:").strip()
        if "extra ==" in requirement:
            continue
        name = requirement.split(";")[0].split("[")[0]
        for stop in "<>=!~ (":
            name = name.split(stop)[0]
        if name.strip().lower() not in _SKIPPED:
            out.append(requirement)
    return out


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8")


def _run(command: Sequence[str], log: Callable[[str], None]) -> None:
    log("$ " + " ".join(command))
    result = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise SetupError(f"{command[0]} {' '.join(command[1:4])} ... failed ({result.returncode}):\n{tail}")


def _download(pip: list[str], release: str, folder: Path, log: Callable[[str], None]) -> Path:
    _run([*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
          "-d", str(folder), release], log)  # fmt: skip
    wheels = sorted(folder.glob(release.split("==")[0].replace("-", "_") + "-*.whl"))
    if not wheels:
        raise SetupError(f"pip downloaded no wheel of {release}")
    return wheels[-1]


def setup_reference(target: Path, log: Callable[[str], None] = print, *, python: str | None = None) -> Path:
    """Build the environment at ``target`` (replacing an unfinished one); returns
    the path of its ``sie-server`` command."""
    marker = target / "sift-reference.txt"
    if marker.is_file():
        log(f"reference environment already set up at {target} ({marker.read_text().strip()})")
        return target / "bin" / "sie-server"
    log(f"creating the reference environment at {target} (several minutes; downloads from PyPI)")
    if python is None:
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
    else:
        _run([python, "-m", "venv", "--clear", str(target)], log)
    pip = [str(target / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix="sift-reference-") as tmp:
        folder = Path(tmp)
        server = _download(pip, REFERENCE_RELEASE, folder, log)
        sdk = _download(pip, SDK_RELEASE, folder, log)
        constraints = folder / "constraints.txt"
        constraints.write_text(f"{TORCH}\n", encoding="utf-8")
        wanted = list(dict.fromkeys(requirements(_metadata(server)) + requirements(_metadata(sdk)) + list(_EXTRA)))
        _run([*pip, "install", "-q", "-c", str(constraints), TORCH, *wanted], log)
        _run([*pip, "install", "-q", "--no-deps", "--ignore-requires-python", str(server), str(sdk)], log)
    # A requirement may still have pulled torchvision in; its build breaks every transformers import.
    _run([*pip, "uninstall", "-y", "-q", "torchvision"], log)
    site = next((target / "lib").glob("python3*/site-packages"))
    for package in ("sie_server", "sie_sdk"):
        rewritten = backport_tree(site / package)
        log(f"{package}: {len(rewritten)} module(s) rewritten for Python {sys.version_info[0]}.{sys.version_info[1]}")
    adapters = "sie_server.adapters.sentence_transformer, sie_server.adapters.gliclass"
    _run([str(target / "bin" / "python"), "-c", f"import sie_server.cli, {adapters}"], log)
    marker.write_text(f"{REFERENCE_RELEASE} {SDK_RELEASE} {TORCH}\n", encoding="utf-8")
    log(f"reference environment ready: {target / 'bin' / 'sie-server'}")
    return target / "bin" / "sie-server"
