from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sift_bench import cli as bench_cli
from sift_bench.arms.server import parse_cpus, pin_prefix
from sift_server.cli import build_parser


def test_sift_bench_is_registered_with_its_options() -> None:
    args = build_parser().parse_args(
        ["bench", "--quick", "--arm", "adaptive", "--arm", "timed", "--rev", "main", "--trials", "2",
         "--client", "httpx", "--server-cpus", "0", "--client-cpus", "none", "--burst-sizes", "4,16"]
    )  # fmt: skip
    assert args.handler is bench_cli.main
    assert args.arm == ["adaptive", "timed"]
    assert args.rev == ["main"]
    assert args.trials == 2
    assert args.quick and args.client == "httpx"
    assert args.burst_sizes == (4, 16)
    assert args.concurrency == (8, 32)
    assert (args.workload, args.primitive, args.output_type, args.head) == ("short", "encode", "dense", None)
    extract = build_parser().parse_args(["bench", "--workload", "mixed", "--primitive", "extract", "--labels", "a,b"])
    assert (extract.workload, extract.primitive, extract.labels) == ("mixed", "extract", "a,b")


def test_the_replay_is_on_unless_turned_off() -> None:
    assert not build_parser().parse_args(["bench"]).no_replay
    args = build_parser().parse_args(["bench", "--no-replay", "--replay-seconds", "1.5"])
    assert args.no_replay and args.replay_seconds == 1.5
    assert bench_cli.QUICK["replay_seconds"] < bench_cli.FULL["replay_seconds"]


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--burst-sizes", "0,8"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--arm", "fastest"])


def test_cpu_lists() -> None:
    assert parse_cpus("0") == {0}
    assert parse_cpus("0,2-3") == {0, 2, 3}
    assert parse_cpus("none") is None
    assert parse_cpus(None) is None
    assert pin_prefix(None) == []


def test_default_pinning_uses_two_cpus_when_there_are_two() -> None:
    available = sorted(os.sched_getaffinity(0))
    server, client = bench_cli.default_cpus(None, None)
    if len(available) >= 2:
        assert server == {available[0]} and client == {available[1]}
    else:
        assert server is None and client is None
    assert bench_cli.default_cpus("none", "none") == (None, None)


def test_fresh_cache_is_a_flag_off_by_default() -> None:
    assert not build_parser().parse_args(["bench"]).fresh_cache
    assert build_parser().parse_args(["bench", "--fresh-cache"]).fresh_cache


@pytest.mark.parametrize("head", ["decoder", "llm-reranker", "bge-m3"])
def test_a_family_head_is_a_choice_and_sets_what_every_request_asks(
    head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sift_bench.run import runner
    from sift_bench.workload import heads
    from sift_bench.workload.request import RequestSpec

    asked = RequestSpec("encode", more_output_types=("sparse",))
    monkeypatch.setattr(heads, "build", lambda name, root: (f"bench/{name}", tmp_path, asked))
    seen: list[Any] = []

    def stop(config: Any) -> None:
        seen.append(config)
        raise ValueError("stop before serving")

    monkeypatch.setattr(runner, "run_bench", stop)
    assert bench_cli.run(["--head", head, "--arm", "torch", "--out", str(tmp_path / "out")]) == 2
    [config] = seen
    assert config.model == f"bench/{head}" and tmp_path in config.catalogs
    assert config.request == asked  # the head's request, not the --primitive default
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--head", "qwen3"])
