"""The settings' flags, per command, and the ``Settings`` a parsed command line makes.

Each flag is made from its field (name, type, help), so a setting cannot be a
variable without a flag, and a command offers only the groups it uses:
``sift gateway`` loads no model and takes no engine flag.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from sift_server.config.settings import GROUPS, Settings, flag, variable

# The groups of settings each command uses, in the order its help shows them.
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "serve": ("models", "server", "frontends", "engine", "limits", "memory", "heap", "process"),
    "worker": ("models", "engine", "limits", "memory", "cluster", "worker", "process"),
    "gateway": ("models", "server", "cluster", "gateway", "heap", "process"),
}


def command_fields(groups: Sequence[str]) -> dict[str, tuple[str, type[BaseModel]]]:
    """Setting name -> (group name, group) for the settings of ``groups`` (a command's)."""
    return {name: (group, GROUPS[group]) for group in groups for name in GROUPS[group].model_fields}


def add_setting_flags(parser: argparse.ArgumentParser, groups: Sequence[str]) -> None:
    """One flag per setting of ``groups`` (a command's), in one help section per group.
    Every default is None: a flag not given leaves the variable or the default."""
    for group_name in groups:
        group = GROUPS[group_name]
        section = parser.add_argument_group(f"{group_name} settings", (group.__doc__ or "").strip())
        for name, field in group.model_fields.items():
            section.add_argument(flag(group, name), dest=name, default=None, **_argument(name, field))


def _argument(name: str, field: FieldInfo) -> dict[str, Any]:
    shown = "none" if field.default in (None, "") else field.default
    help_text = f"{field.description} [{variable(name)}; default {shown}]".replace("%", "%%")
    kind = _unwrap_optional(field.annotation)
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction, "help": help_text}
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        return {"action": "append", "type": item, "help": help_text}
    if typing.get_origin(kind) is typing.Literal:
        return {"choices": typing.get_args(kind), "help": help_text}
    return {"type": kind if kind in (int, float, Path) else str, "help": help_text}


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def flag_values(args: argparse.Namespace, groups: Sequence[str]) -> dict[str, Any]:
    """The settings of ``groups`` given as flags on a parsed command line."""
    return {name: getattr(args, name) for name in command_fields(groups) if getattr(args, name, None) is not None}


def make_settings(flags: Mapping[str, Any]) -> Settings | None:
    """Settings from the environment with ``flags`` on top (None: invalid, reported)."""
    try:
        return Settings(**flags)
    except ValidationError as exc:
        print(f"sift: invalid setting: {exc}", file=sys.stderr)
        return None


def settings_from_args(args: argparse.Namespace, groups: Sequence[str]) -> Settings | None:
    return make_settings(flag_values(args, groups))
