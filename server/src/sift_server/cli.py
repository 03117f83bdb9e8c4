"""The ``sift`` command.

Serving:
  serve       serve models over HTTP on one machine
  models      list the catalog (or a running server's models with --url);
              models prepare [MODEL...]: export and decide auto's backends ahead (at install time)
  gateway     the HTTP API with no model, sending work to workers over NATS JetStream
  worker      load models and serve their work from NATS JetStream
  cluster     a NATS server, a gateway and N workers on one machine, to try scale-out
  config      print a command's effective settings: value and source (flag, SIFT_* variable, default)

Measuring:
  bench       compare batching policies or code revisions through the HTTP API
  simulate    replay arrival traces through the batching policies on a virtual clock
  overhead    cold start, memory and what the server adds to one request over the in-process forward
  primitives  score and extract through the server against the reference library's own batch call
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sift_server.config.flags import COMMAND_GROUPS, add_setting_flags, flag_values, make_settings, settings_from_args


def _add_serve(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="Serve models over HTTP (the default model loads before ready).")
    add_setting_flags(p, COMMAND_GROUPS["serve"])
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from sift_server.registry.catalog import CatalogError
    from sift_server.server import serve

    settings = settings_from_args(args, COMMAND_GROUPS["serve"])
    if settings is None:
        return 2
    try:
        serve(settings)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_config(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "config",
        help="Print a command's effective settings (value, and source: flag, SIFT_* variable or default).",
        description="sift config [--json] [serve|worker|gateway] [that command's flags]: every setting the command "
        "would run with, where each value came from, and its flag and variable.",
    )
    p.add_argument("target", nargs="?", choices=tuple(COMMAND_GROUPS), default="serve", help="The command (serve).")
    p.add_argument("--json", action="store_true", help="Print JSON.")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="Flags of that command.")
    p.set_defaults(handler=_config)


def _config(args: argparse.Namespace) -> int:
    from sift_server.config.effective import effective, render

    target = argparse.ArgumentParser(prog=f"sift config {args.target}")
    groups = COMMAND_GROUPS[args.target]
    add_setting_flags(target, groups)
    flags = flag_values(target.parse_args(args.flags), groups)
    settings = make_settings(flags)
    if settings is None:
        return 2
    print(render(effective(settings, groups, flags), as_json=args.json))
    return 0


def _add_models(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="List catalog models (or a running server's with --url).")
    p.add_argument("--catalog", action="append", type=Path, default=[], help="Extra catalog folder (repeatable).")
    p.add_argument("--url", help="Ask a running server instead, e.g. http://127.0.0.1:8080.")
    p.add_argument("--json", action="store_true", help="Print JSON.")
    p.set_defaults(handler=_models)
    actions = p.add_subparsers(dest="action", metavar="{prepare}")
    prepare = actions.add_parser(
        "prepare",
        help="Export and decide auto's backend for MODEL (default: the default model) ahead, as `sift serve` "
        "would on a first start, so that the server opens the chosen runtime at once.",
    )
    prepare.add_argument("models", nargs="*", metavar="MODEL", help="Catalog names (default: the default model).")
    add_setting_flags(prepare, COMMAND_GROUPS["serve"])
    prepare.set_defaults(handler=_prepare)


def _prepare(args: argparse.Namespace) -> int:
    import logging
    import time

    from sift_server.registry.catalog import Catalog, CatalogError
    from sift_server.registry.deciding import prepare

    settings = settings_from_args(args, COMMAND_GROUPS["serve"])
    if settings is None:
        return 2
    # Progress on the terminal: the exports and the timing rounds log as they go.
    logging.basicConfig(level=logging.INFO, format="sift: %(message)s", stream=sys.stderr)
    try:
        catalog = Catalog.from_dirs(settings.catalog)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    names = args.models or [settings.default_model]
    unknown = [name for name in names if name not in catalog]
    if unknown:
        print(f"sift: not in the catalog: {', '.join(unknown)}; known: {', '.join(catalog.names())}", file=sys.stderr)
        return 2
    failed = 0
    for index, name in enumerate(names, 1):
        print(f"sift: [{index}/{len(names)}] preparing {name}", file=sys.stderr)
        started = time.perf_counter()
        try:
            runtime = prepare(
                catalog.specs[name],
                torch_threads=settings.torch_threads,
                backend_override=settings.backend,
                rechoose_backend=settings.rechoose_backend,
                cache_dir=settings.cache_dir,
                calibrate=settings.calibrate,
            )
        except Exception as exc:  # one model failing must not stop the others
            failed += 1
            print(f"sift: [{index}/{len(names)}] {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        seconds = time.perf_counter() - started
        chosen = f"{runtime.get('backend')} {runtime.get('precision')} ({runtime.get('selected_by')})"
        print(f"sift: [{index}/{len(names)}] {name}: {chosen} in {seconds:.1f}s")
    return 1 if failed else 0


def _models(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]]
    if args.url:
        import urllib.request

        # The standard library suffices for one GET; the server install carries no HTTP client.
        request = urllib.request.Request(args.url.rstrip("/") + "/v1/models", headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            listing = json.loads(response.read())
        rows = [
            {"name": m["name"], "tasks": ",".join(m.get("tasks", m["outputs"])), "state": m["state"]}
            for m in listing["models"]
        ]
    else:
        from sift_server.registry.catalog import Catalog, CatalogError

        try:
            catalog = Catalog.from_dirs(args.catalog, check_weights=False)
        except CatalogError as exc:
            print(f"sift: catalog error: {exc}", file=sys.stderr)
            return 2
        rows = [
            {"name": s.name, "tasks": ",".join(s.tasks), "adapter": s.adapter, "source": _source(s.source)}
            for s in catalog.specs.values()
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if rows:
        keys = list(rows[0])
        widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
        print("  ".join(k.upper().ljust(widths[k]) for k in keys))
        for row in rows:
            print("  ".join(str(row[k]).ljust(widths[k]) for k in keys))
    return 0


def _source(source: Any) -> str:
    if source is None:
        return "remote"
    if source.package:
        return f"package:{source.package}"
    if source.path:
        return f"path:{source.path}"
    return f"hf:{source.hf}"


# Command groups of this distribution kept in their own packages, registered as the
# plugins below are (a ``register(subparsers)`` each), so that no package imports this
# module back: "module:function".
BUILTIN_COMMANDS = ("sift_server.cluster.cli:register",)

# Subcommands other distributions add through this entry-point group: each entry
# point is named after its command and loads a ``register(subparsers)``.
COMMAND_GROUP = "sift.commands"
# Commands of the benchmark distribution, named here so that a server-only
# install answers ``sift bench`` with what to install instead of "invalid choice".
BENCH_COMMANDS = ("bench", "overhead", "primitives", "simulate")


def _add_plugins(subparsers: Any) -> None:
    from importlib.metadata import entry_points

    found = set()
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        entry.load()(subparsers)
        found.add(entry.name)
    for name in BENCH_COMMANDS:
        if name not in found:
            p = subparsers.add_parser(name, help="(needs the sift-bench distribution: pip install ./bench)")
            p.set_defaults(handler=_needs_bench)


def _needs_bench(args: argparse.Namespace) -> int:
    print(
        f"sift {args.command}: part of the benchmark harness, a separate distribution; "
        "install it with `pip install ./bench` from a Sift checkout (`make setup` does).",
        file=sys.stderr,
    )
    return 2


def _own_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The ``sift`` command with this distribution's commands, and its subcommand table."""
    parser = argparse.ArgumentParser(prog="sift", description="Sift inference server.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_serve(subparsers)
    _add_models(subparsers)
    _add_config(subparsers)
    for registrar in BUILTIN_COMMANDS:
        module, _, function = registrar.partition(":")
        getattr(importlib.import_module(module), function)(subparsers)
    return parser, subparsers


def build_parser() -> argparse.ArgumentParser:
    """The whole ``sift`` command, other distributions' commands included."""
    parser, subparsers = _own_parser()
    _add_plugins(subparsers)
    return parser


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser ``argv`` needs. A command of this distribution (serve, worker, gateway, models)
    skips the entry-point scan and the benchmark harness's import, a few tenths of a second of
    every server's start; help, no command or another command gets the whole parser."""
    parser, subparsers = _own_parser()
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command is None or command not in subparsers.choices:
        _add_plugins(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = parser_for(argv)
    args, unknown = parser.parse_known_args(argv)
    # A bench command on a server-only install takes any flags: it only says what to install.
    if unknown and args.handler is not _needs_bench:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
