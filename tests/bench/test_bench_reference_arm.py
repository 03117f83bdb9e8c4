"""The reference arm: the released SIE server given the bench's model as local
weights, run under the bench's pinning and phases, judged against a Sift arm.
The real server needs its own environment (``sift bench reference-setup``);
here a stand-in command (tests/bench/fake_reference.py) takes its place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sift_bench.arms.arm import ArmError, policy_arm, reference_arm
from sift_bench.arms.reference.backport import BackportError, backport_source
from sift_bench.arms.reference.models import ReferenceModelError, reference_config
from sift_bench.arms.reference.setup import requirements
from sift_bench.run.runner import run_bench
from sift_server.cli import build_parser
from tests.bench.tiny_bench import tiny_bench
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

FAKE = [sys.executable, str(Path(__file__).with_name("fake_reference.py"))]


def test_reference_parses_as_an_arm() -> None:
    args = build_parser().parse_args(["bench", "--arm", "adaptive", "--arm", "reference", "--client", "raw"])
    assert args.arm == ["adaptive", "reference"]
    assert args.client == "raw"
    arm = reference_arm()
    assert (arm.name, arm.kind, arm.server_args) == ("reference", "reference", [])


def test_bench_subcommands_sit_beside_the_bench_options() -> None:
    args = build_parser().parse_args(["bench", "reference-setup", "--venv", "/tmp/x"])
    assert args.venv == Path("/tmp/x")
    args = build_parser().parse_args(["bench", "cluster", "latency", "--interleave"])
    assert (args.what, args.interleave) == ("latency", True)
    assert build_parser().parse_args(["bench", "--quick"]).bench_command is None


def test_models_config_names_the_local_weights(tmp_path: Path) -> None:
    model_dir = build_tiny_embedder(tmp_path / "model")
    write_catalog_entry(tmp_path / "catalog", model_dir)
    config = reference_config(TINY_EMBEDDER, [tmp_path / "catalog"])
    assert config["sie_id"] == TINY_EMBEDDER
    assert Path(config["weights_path"]) == model_dir
    assert (
        config["tasks"]["encode"]["dense"]["dim"] == json.loads((model_dir / "config.json").read_text())["hidden_size"]
    )
    assert "hf_id" not in config  # never the hub
    with pytest.raises(ReferenceModelError, match="no catalog"):
        reference_config("nope/nothing", [tmp_path / "catalog"])


def test_requirements_drop_extras_and_the_pinned_ones() -> None:
    metadata = "\n".join([
        "Requires-Dist: torch<2.10,>=2.9",
        "Requires-Dist: fastapi<1,>=0.115",
        "Requires-Dist: docling<2.100,>=2.99",
        "Requires-Dist: sie-sdk[storage]>=0.1",
        "Requires-Dist: flash-attn<3,>=2.7; (sys_platform == 'linux') and extra == 'flash-attn'",
        "Requires-Dist: gliclass<1,>=0.1.17",
    ])  # fmt: skip
    assert requirements(metadata) == ["fastapi<1,>=0.115", "gliclass<1,>=0.1.17"]


def test_backport_rewrites_type_parameters_and_keeps_meaning() -> None:
    source = "\n".join([
        "from __future__ import annotations",
        "from dataclasses import dataclass",
        "",
        "@dataclass(slots=True)",
        "class Box[T: int, U]:",
        "    item: T",
        "",
        "class Sub[V](Box[V, V]):",
        "    pass",
        "",
        "def pick[N: (int, float)](a: N, b: N) -> N:",
        "    return max(a, b)",
        "",
    ])  # fmt: skip
    fixed = backport_source(source)
    assert "class Box(_Generic[T, U]):" in fixed
    assert "class Sub(Box[V, V], _Generic[V]):" in fixed
    assert fixed.index('T = _TypeVar("T", bound="int")') < fixed.index("@dataclass")
    namespace: dict[str, object] = {}
    exec(compile(fixed, "<backported>", "exec"), namespace)
    box = namespace["Box"](3)  # type: ignore[operator]
    assert box.item == 3
    assert namespace["pick"](2, 5.0) == 5.0  # type: ignore[operator]
    assert namespace["Box"].__parameters__ == (namespace["T"], namespace["U"])  # type: ignore[attr-defined]


def test_backport_refuses_eager_annotations() -> None:
    with pytest.raises(BackportError):
        backport_source("def f[T](x: T) -> T:\n    return x\n")


@pytest.mark.e2e
@pytest.mark.slow
def test_reference_arm_runs_the_phases_and_gets_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_bench(tmp_path, [policy_arm("adaptive"), reference_arm(launcher=FAKE)], "raw", sequential=5)
    record = tmp_path / "fake-reference.json"
    monkeypatch.setenv("FAKE_REFERENCE_RECORD", str(record))
    monkeypatch.setenv("FAKE_REFERENCE_CATALOG", str(config.catalogs[0]))
    results = run_bench(config)
    runs = {r["arm"]: r for r in results["runs"]}
    assert runs["reference"]["valid"], runs["reference"]["problems"]
    assert runs["adaptive"]["valid"], runs["adaptive"]["problems"]
    # The stand-in was given the run's model from a models folder, on the CPU, on loopback, offline.
    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[argv.index("--preload") + 1] == TINY_EMBEDDER
    assert argv[argv.index("--device") + 1] == "cpu"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--no-hf-fallback" in argv
    (only,) = seen["configs"].values()
    assert only["sie_id"] == TINY_EMBEDDER and Path(only["weights_path"]).is_dir()
    assert seen["omp_threads"] == "1"
    command = runs["reference"]["server"]["command"]
    if config.server_cpus:
        assert command[0].endswith("taskset")
    (verdict,) = results["dominance"]
    assert (verdict["arm"], verdict["reference"], verdict["phase"]) == ("adaptive", "reference", "closed8")
    assert [c["stat"] for c in verdict["checks"]] == ["p50", "p90", "p99", "max", "throughput"]
    report = (config.out_dir / "report.md").read_text()
    assert "## Against the reference" in report and "adaptive / reference" in report
    closed = results["analysis"]["summary"]["reference"]["closed8"]["per_trial"][0]
    assert closed["client_cores"] is not None and closed["client_cores"] > 0


def test_reference_arm_without_its_environment_says_how_to_make_it(tmp_path: Path) -> None:
    config = tiny_bench(tmp_path, [reference_arm(launcher=[str(tmp_path / "missing" / "sie-server")])], "raw",
                        sequential=2)  # fmt: skip
    results = run_bench(config)
    (run,) = results["runs"]
    assert not run["valid"]
    assert "sift bench reference-setup" in run["problems"][0]


def test_unknown_arm_names_are_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--arm", "referee"])
    with pytest.raises(ArmError):
        from sift_bench.arms.arm import backend_arm

        backend_arm("reference")
