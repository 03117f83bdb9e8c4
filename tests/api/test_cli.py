"""The `sift` command's own behaviour (no server started)."""

from __future__ import annotations

import json

import pytest

from sift_server.cli import main


def test_invalid_setting_from_the_environment_fails_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIFT_POLICY", "fastest")
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "policy" in err and "adaptive" in err


def test_models_lists_the_shipped_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {row["name"]: row for row in rows}
    assert by_name["sentence-transformers/all-MiniLM-L6-v2"]["tasks"] == "encode"
    assert by_name["urchade/gliner_small-v2.1"]["adapter"] == "gliner"
    assert by_name["cross-encoder/ms-marco-MiniLM-L-6-v2"]["source"].startswith("hf:")


def test_models_table_has_a_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.split()[:3] == ["NAME", "TASKS", "ADAPTER"]


def test_serve_flags_reach_uvicorn(monkeypatch: pytest.MonkeyPatch) -> None:
    from sift_server.server import DrainingServer

    seen: dict[str, object] = {}

    def fake_run(self: DrainingServer, sockets: object = None) -> None:
        seen["keep_alive"] = self.config.timeout_keep_alive
        seen["port"] = self.config.port
        seen["policy"] = self.sift_state.settings.policy

    monkeypatch.setattr(DrainingServer, "run", fake_run)
    assert main(["serve", "--port", "8123", "--keep-alive-s", "30", "--policy", "timed"]) == 0
    assert seen == {"keep_alive": 30, "port": 8123, "policy": "timed"}


def test_backend_flags_reach_the_model_loader_and_leave_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from sift_server.server import DrainingServer

    monkeypatch.delenv("SIFT_RECHOOSE_BACKEND", raising=False)
    before = dict(os.environ)
    seen: dict[str, object] = {}

    def fake_run(self: DrainingServer, sockets: object = None) -> None:
        registry = self.sift_state.registry
        keywords = registry._loader.keywords  # type: ignore[attr-defined]  # the composition's partial
        seen["loader"] = (keywords["backend_override"], keywords["rechoose_backend"])
        seen["registry"] = registry.backend_override

    monkeypatch.setattr(DrainingServer, "run", fake_run)
    assert main(["serve", "--rechoose-backend", "--backend", "onnx:int8"]) == 0
    assert seen == {"loader": ("onnx:int8", True), "registry": "onnx:int8"}
    assert dict(os.environ) == before


@pytest.mark.parametrize(
    ("argv", "plugins"),
    [
        (["serve", "--port", "0"], False),
        (["worker", "--nats-url", "nats://x"], False),
        (["gateway"], False),
        (["models"], False),
        (["bench", "--arm", "torch"], True),
        (["--help"], True),
        ([], True),
    ],
)
def test_other_distributions_commands_are_looked_up_only_when_asked_for(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], plugins: bool
) -> None:
    """Finding the entry points of installed distributions and importing the benchmark harness's
    command module costs a server, worker or gateway a few tenths of a second at every start."""
    from sift_server import cli

    looked: list[None] = []
    monkeypatch.setattr(cli, "_add_plugins", lambda subparsers: looked.append(None))
    parser = cli.parser_for(argv)
    assert looked == ([None] if plugins else [])
    if not plugins:
        assert parser.parse_known_args(argv)[0].command == argv[0]
