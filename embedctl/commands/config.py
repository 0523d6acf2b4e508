"""`embedctl config show|validate|keys`: print a resolved config, check config files, list every key."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from embedctl.config import load_config
from embedctl.config.reference import reference_markdown, reference_rows
from embedctl.errors import ConfigError
from embedctl.util.console import stderr_console, stdout_console


def show(loaded: Any) -> None:
    """The resolved config (all layers and overrides applied) as YAML on stdout, each value followed by a
    comment saying where it came from (default, model file, config layer, file, command line)."""
    sys.stdout.write(annotate_origins(loaded.to_yaml(), loaded.origin))


_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w\-]*):(?P<rest>.*)$")


def annotate_origins(text: str, origin_of) -> str:
    """``# origin`` after every `key: value` line (and every key whose value is a block list) of OmegaConf's YAML."""
    out: list[str] = []
    path: list[str] = []
    for line in text.splitlines():
        m = _KEY_LINE.match(line)
        if m is None:
            out.append(line)
            continue
        depth = len(m["indent"]) // 2
        path = path[:depth] + [m["key"]]
        rest = m["rest"].strip()
        if depth == 0 and not rest:
            out.append(line)  # a section heading
            continue
        out.append(f"{line}  # {origin_of('.'.join(path))}")
    return "\n".join(out) + "\n"


def validate(configs: list[str] | None) -> int:
    """Load every config (default: every file under ./configs), reporting each; returns the exit code (2 if any failed)."""
    paths = configs or sorted(str(p) for p in Path("configs").glob("**/*.y*ml"))
    if not paths:
        raise ConfigError(["no config files given and none found under ./configs"])
    failed = 0
    console = stderr_console()
    for path in paths:
        try:
            load_config(path)
            console.print(f"ok      {path}", markup=False)
        except ConfigError as err:
            failed += 1
            console.print(f"FAILED  {err}", markup=False)
    return 2 if failed else 0


def keys(prefix: str | None = None, markdown: bool = False) -> None:
    """Every config key (or those starting with ``prefix``): a table, or the Markdown reference."""
    if markdown:
        sys.stdout.write(reference_markdown())
        return
    table = Table("key", "type", "default", "meaning", show_lines=False)
    for row in reference_rows():
        if prefix is None or row.key.startswith(prefix):
            table.add_row(*(escape(text) for text in (row.key, row.type, row.default, row.doc)))
    stdout_console().print(table)
