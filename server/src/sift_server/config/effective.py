"""The effective configuration of a command: every setting, its value and where it
came from (a flag, a ``SIFT_*`` variable or the default), for ``sift config``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sift_server.config.flags import command_fields
from sift_server.config.settings import Settings, flag, variable

# Shown as set or not, never in clear.
SECRETS = frozenset({"api_key"})


@dataclass(frozen=True, slots=True)
class Row:
    group: str
    name: str
    value: Any
    source: str  # "flag", "env" or "default"
    flag: str
    variable: str


def effective(
    settings: Settings, groups: Sequence[str], flags: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[Row]:
    """One row per setting of ``groups`` (a command's). A variable counts whatever its case
    (the settings read them case-insensitively), an empty one counts as unset; ``environ``: the process's by default."""
    present = {key.upper() for key, value in (os.environ if environ is None else environ).items() if value}
    rows = []
    for name, (group_name, group) in command_fields(groups).items():
        source = "flag" if name in flags else "env" if variable(name) in present else "default"
        value = getattr(settings, name)
        if name in SECRETS and value is not None:
            value = "(set)"
        rows.append(Row(group_name, name, _plain(value), source, flag(group, name), variable(name)))
    return rows


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def render(rows: Sequence[Row], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(row) for row in rows], indent=2)
    cells = [("GROUP", "SETTING", "VALUE", "SOURCE", "FLAG", "VARIABLE")]
    cells += [(r.group, r.name, json.dumps(r.value), r.source, r.flag, r.variable) for r in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)
