"""Gateway arms: ``sift bench --arm adaptive --arm gateway`` runs the same phases
directly and through nats-server, a gateway and one worker, in one report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sift_bench.arms.arm import ArmError, gateway_arm, is_gateway_arm, policy_arm
from sift_bench.run.runner import run_bench
from sift_server.cli import build_parser
from tests.bench.tiny_bench import tiny_bench


def test_gateway_arms_parse_beside_policies() -> None:
    args = build_parser().parse_args(["bench", "--arm", "adaptive", "--arm", "gateway", "--arm", "gateway:timed"])
    assert args.arm == ["adaptive", "gateway", "gateway:timed"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--arm", "gateway:nope"])


def test_gateway_arm_runs_a_policy_through_the_queue() -> None:
    arm = gateway_arm("gateway")
    assert (arm.name, arm.policy, arm.kind, arm.server_args) == ("gateway", "adaptive", "gateway", [])
    assert gateway_arm("gateway:timed").policy == "timed"
    assert is_gateway_arm("gateway:immediate") and not is_gateway_arm("adaptive")
    with pytest.raises(ArmError):
        gateway_arm("gate")


@pytest.mark.e2e
@pytest.mark.slow
def test_bench_compares_direct_and_gateway_in_one_report(tmp_path: Path) -> None:
    config = tiny_bench(tmp_path, [policy_arm("adaptive"), gateway_arm("gateway")], "httpx", sequential=5)
    out = config.out_dir
    results = run_bench(config)
    runs = {r["arm"]: r for r in results["runs"]}
    assert set(runs) == {"adaptive", "gateway"}
    for run in runs.values():
        assert run["valid"], run["problems"]
        # The worker's trace joins every request that went through the gateway.
        assert run["joined"] == run["requests"] > 0
    assert "worker" in " ".join(runs["gateway"]["server"]["command"])
    report = (out / "report.md").read_text()
    assert "through nats-server + sift gateway" in report
    assert json.loads((out / "results.json").read_text())["arms"][1]["kind"] == "gateway"
