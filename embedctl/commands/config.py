"""`embedctl config show|validate|keys`: print a resolved config, check config files, list every key."""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any

from embedctl.config import load_config
from embedctl.config.reference import reference_markdown, reference_rows
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.util.console import stderr_console
from embedctl.util.tables import print_table


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
    """Load every config (default: every file under ./configs), reporting each; returns the exit code (2 if any failed).

    ``key=value`` items (not an existing file) are overrides applied to each file, as every command takes them;
    overrides alone are checked over the defaults (`embedctl config validate train.resume=sometimes`)."""
    args = list(configs or [])
    overrides = [a for a in args if "=" in a and not Path(a).exists()]
    files = [a for a in args if a not in overrides]
    paths: list[str | None] = list(files) or ([] if overrides else sorted(str(p) for p in Path("configs").glob("**/*.y*ml")))
    if not paths and not overrides:
        raise ConfigError(["no config files given and none found under ./configs"])
    with_overrides = f" with {' '.join(overrides)}" if overrides else ""
    failed = 0
    console = stderr_console()
    for path in paths or [None]:
        try:
            load_config(path, overrides)
            console.print(f"ok      {path or 'the defaults'}{with_overrides}", markup=False)
        except ConfigError as err:
            failed += 1
            console.print(f"FAILED  {err}", markup=False)
    return 2 if failed else 0


def keys(prefix: str | None = None, markdown: bool = False) -> None:
    """Every config key (or those starting with ``prefix``): a table on a terminal, TSV in a pipe, or the
    Markdown reference. A prefix no key starts with is an error with the nearest section or key (exit 2)."""
    if markdown:
        sys.stdout.write(reference_markdown())
        return
    rows = [r for r in reference_rows() if prefix is None or r.key == prefix or r.key.startswith(prefix)]
    if not rows:
        sections = sorted({r.key.split(".")[0] for r in reference_rows()})
        near = (difflib.get_close_matches(prefix or "", sections, n=1, cutoff=0.5)
                or difflib.get_close_matches(prefix or "", [r.key for r in reference_rows()], n=2, cutoff=0.5))
        raise EmbedctlError(
            f"config keys {prefix}: no key starts with {prefix!r}"
            + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""),
            hint=f"sections: {', '.join(sections)} (e.g. `embedctl config keys {near[0] if near else 'train'}`)",
            exit_code=2,
        )
    print_table(("key", "type", "default", "meaning"), [(r.key, r.type, r.default, r.doc) for r in rows],
                keep=("key",), shorten=("default",))
