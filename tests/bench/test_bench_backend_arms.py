"""Backend arms: ``sift bench --arm openvino`` runs the current tree with every
model on that backend (``sift serve --backend``)."""

from __future__ import annotations

import pytest

from sift_bench.arms.arm import ArmError, backend_arm, is_backend_arm, policy_arm
from sift_server.cli import build_parser


def test_backend_arms_parse_beside_policies() -> None:
    args = build_parser().parse_args(["bench", "--arm", "torch", "--arm", "openvino", "--arm", "onnx:int8"])
    assert args.arm == ["torch", "openvino", "onnx:int8"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--arm", "openvino:fp64"])


def test_backend_arm_passes_the_backend_to_the_server() -> None:
    # A bare torch arm is the path before backends: PyTorch fp32, nothing chosen.
    assert backend_arm("torch").server_args == ["--backend", "torch:fp32"]
    arm = backend_arm("openvino:fp32")
    assert (arm.name, arm.policy, arm.server_args) == ("openvino:fp32", "adaptive", ["--backend", "openvino:fp32"])
    assert arm.as_dict()["backend"] == "openvino:fp32"
    assert policy_arm("adaptive").server_args == []
    assert not is_backend_arm("adaptive")
    with pytest.raises(ArmError):
        backend_arm("tensorrt")


def test_serve_accepts_the_backend_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from sift_server.cli import main

    args = build_parser().parse_args(["serve", "--backend", "openvino:bf16"])
    assert args.backend == "openvino:bf16"
    # Checked with the settings (the same message for the flag and SIFT_BACKEND), before anything starts.
    assert main(["serve", "--backend", "cuda"]) == 2
    assert "BACKEND[:PRECISION]" in capsys.readouterr().err


def test_server_cpu_sampler_reads_a_process() -> None:
    import os
    import time

    from sift_bench.arms.cpu import CpuSampler, read_cpu_seconds

    before = read_cpu_seconds(os.getpid())
    assert before is not None
    sampler = CpuSampler(os.getpid(), interval_s=0.01).start()
    start = time.perf_counter()
    while read_cpu_seconds(os.getpid()) == before:  # spend CPU until the clock ticks
        sum(range(10_000))
    end = time.perf_counter()
    sampler.stop()
    cores = sampler.cores_used(start, end)
    assert cores is not None and cores >= 0.0
    assert sampler.cores_used(end + 60, end + 61) is None  # outside the samples
    assert read_cpu_seconds(2**22 + 12345) is None


def test_the_open_loop_arm_runs_the_adaptive_policy_with_the_engines_open_loop_rules_on() -> None:
    from sift_bench.cli import _make_arm
    from sift_server.config.settings import EngineSettings

    args = build_parser().parse_args(["bench", "--arm", "adaptive", "--arm", "adaptive-open"])
    assert args.arm == ["adaptive", "adaptive-open"]
    arm = _make_arm("adaptive-open")
    assert (arm.policy, arm.server_args) == ("adaptive", ["--open-loop-rules"])
    # The flag it passes is one `sift serve` takes, and it reaches the engine's setting.
    serve = build_parser().parse_args(["serve", "--open-loop-rules"])
    assert serve.open_loop_rules is True
    assert EngineSettings().open_loop_rules is False
