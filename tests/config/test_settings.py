"""The settings: each one a flag and a SIFT_* variable, each command only its groups,
and ``sift config`` showing every value with its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sift_server.cli import build_parser, main
from sift_server.config import Settings
from sift_server.config.flags import COMMAND_GROUPS, command_fields
from sift_server.config.settings import GROUPS, flag, variable


def test_every_setting_belongs_to_a_command_and_every_group_to_settings() -> None:
    offered = {name for groups in COMMAND_GROUPS.values() for name in command_fields(groups)}
    assert offered == set(Settings.model_fields)
    assert {g for groups in COMMAND_GROUPS.values() for g in groups} == set(GROUPS)
    # Settings is flat (settings.port): a name in two groups would be one setting.
    assert sum(len(group.model_fields) for group in GROUPS.values()) == len(Settings.model_fields)


@pytest.mark.parametrize("command", sorted(COMMAND_GROUPS))
def test_each_setting_of_a_command_is_its_flag_and_its_variable(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag given beats the variable, which beats the default, for every setting (a value of
    the right type that differs from the default, so that a missing flag or variable shows)."""
    for name, (_, group) in command_fields(COMMAND_GROUPS[command]).items():
        value = _other_value(name, Settings.model_fields[name].default)
        text = (
            str(value[0]) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) else str(value)
        )
        monkeypatch.setenv(variable(name), json.dumps([str(v) for v in value]) if isinstance(value, list) else text)
        assert getattr(Settings(), name) == value, name
        monkeypatch.delenv(variable(name))
        argv = [f"--no-{flag(group, name)[2:]}"] if value is False else [flag(group, name)]
        argv += [] if isinstance(value, bool) else [text]
        args = build_parser().parse_args([command, *argv])
        assert getattr(args, name) == value, name


def _other_value(name: str, default: object) -> object:
    special = {
        "policy": "timed",
        "stream_storage": "memory",
        "backend": "onnx:int8",
        "log_level": "debug",
        "keep_alive_s": 30,
        "catalog": [Path("/srv/catalog")],
        "cache_dir": Path("/tmp/sift-x"),
        "trace_file": Path("/tmp/sift-x.jsonl"),
        "otlp_endpoint": "http://127.0.0.1:4318",
        "max_inflight": 16,
    }
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 3
    if isinstance(default, float):
        return default + 1.5
    if isinstance(default, list):
        return ["some/model"]
    return "some-value"


@pytest.mark.parametrize("flag_text", ["--policy", "--torch-threads", "--backend", "--max-hold-ms", "--preload"])
def test_the_gateway_takes_no_model_flag(flag_text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", flag_text, "1"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_the_batching_model_constants_are_no_settings() -> None:
    for gone in ("link_gap_ms", "busy_link_gap_ms", "quiet_gap_ms", "return_horizon_ms", "idle_coalesce_ms"):
        assert gone not in Settings.model_fields
    assert "max_burst_hold_ms" not in Settings.model_fields and "forward_nice" not in Settings.model_fields


def test_sift_config_shows_value_and_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIFT_POLICY", "timed")
    monkeypatch.setenv("SIFT_API_KEY", "secret-key")
    monkeypatch.delenv("SIFT_MAX_HOLD_MS", raising=False)
    monkeypatch.delenv("SIFT_QUEUE_TIMEOUT_S", raising=False)
    assert main(["config", "--json", "serve", "--max-hold-ms", "4"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(command_fields(COMMAND_GROUPS["serve"]))
    assert (rows["policy"]["value"], rows["policy"]["source"]) == ("timed", "env")
    assert (rows["max_hold_ms"]["value"], rows["max_hold_ms"]["source"]) == (4.0, "flag")
    assert (rows["queue_timeout_s"]["value"], rows["queue_timeout_s"]["source"]) == (30.0, "default")
    assert rows["api_key"]["value"] == "(set)"  # never printed
    assert (rows["policy"]["flag"], rows["policy"]["variable"]) == ("--policy", "SIFT_POLICY")


def test_sift_config_table_for_the_gateway(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "gateway", "--nats-url", "nats://10.0.0.1:4222"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["GROUP", "SETTING", "VALUE", "SOURCE", "FLAG", "VARIABLE"]
    [nats] = [line.split() for line in lines if line.split()[1] == "nats_url"]
    assert nats == ["cluster", "nats_url", '"nats://10.0.0.1:4222"', "flag", "--nats-url", "SIFT_NATS_URL"]
    assert not any(line.split()[1] == "policy" for line in lines[1:])


def test_sift_config_reports_an_invalid_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIFT_BACKEND", "tpu")
    assert main(["config"]) == 2
    assert "BACKEND[:PRECISION]" in capsys.readouterr().err


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIFT_BACKEND", "")
    monkeypatch.setenv("SIFT_RECHOOSE_BACKEND", "")
    settings = Settings()
    assert settings.backend is None and settings.rechoose_backend is False


def test_docs_configuration_lists_every_setting_with_its_flag_and_variable() -> None:
    import re

    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    rows = re.findall(r"^\| `([a-z_]+)` \| `(--[a-z-]+)` \| `(SIFT_[A-Z_]+)` \|", docs.read_text(), flags=re.MULTILINE)
    expected = [(name, flag(group, name), variable(name)) for group in GROUPS.values() for name in group.model_fields]
    assert sorted(rows) == sorted(expected)
