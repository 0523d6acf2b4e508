"""Every hint names a flag or key that exists (issue 18): walks the messages and hints of every
EmbedctlError / InputError / ConfigError / NotImplementedYet / RowError raised in embedctl/ and checks each
`--flag` against the options of every subcommand, and each dotted config key against the schema."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import typer

from embedctl.cli.main import app
from embedctl.config.reference import reference_rows

ROOT = Path(__file__).resolve().parents[1] / "embedctl"
ERRORS = {"EmbedctlError", "InputError", "ConfigError", "NotImplementedYet", "RowError"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
KEY = re.compile(r"(?<![\w./-])([a-z_]+(?:\.[a-z_0-9]+)+)")
# flags of other programs a hint may name (the launchers embedctl runs under)
OTHER_PROGRAMS = {"--nproc-per-node", "--standalone"}


def _texts(node: ast.AST) -> list[str]:
    """String constants in a message / hint expression (f-string literal parts included)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _messages() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # hints built in a variable first (hint = ...; hint += ...)
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            if any(isinstance(t, ast.Name) and "hint" in t.id.lower() for t in targets) and node.value is not None:
                found += [(str(path.relative_to(ROOT.parent)), node.lineno, t) for t in _texts(node.value)]
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
            if name not in ERRORS:
                continue
            parts = list(call.args) + [kw.value for kw in call.keywords if kw.arg in ("hint", None)]
            for part in parts:
                for text in _texts(part):
                    found.append((str(path.relative_to(ROOT.parent)), call.lineno, text))
    return found


def _all_options() -> set[str]:
    options: set[str] = set()

    def walk(cmd: click.Command) -> None:
        for param in cmd.params:
            options.update(o for o in param.opts + param.secondary_opts if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return options


def _config_keys() -> set[str]:
    return {row.key for row in reference_rows()}


def test_the_walk_finds_hints():
    texts = [t for _, _, t in _messages()]
    assert len(texts) > 100 and any("--overwrite" in t for t in texts)


def test_every_flag_named_in_a_message_or_hint_exists():
    options = _all_options() | OTHER_PROGRAMS
    bad = [f"{where}:{line}: {flag} ({text!r})" for where, line, text in _messages()
           for flag in FLAG.findall(text) if flag not in options]
    assert not bad, "hints naming flags no subcommand has:\n" + "\n".join(bad)


def test_every_config_key_named_in_a_message_or_hint_exists():
    keys = _config_keys()
    sections = {k.split(".")[0] for k in keys}
    bad = []
    for where, line, text in _messages():
        for key in KEY.findall(text):
            key = key.rstrip(".")
            if key.split(".")[0] not in sections or key.endswith((".json", ".yaml", ".tsv", ".npy", ".parquet")):
                continue  # not a config key (a file name, a module path, a Python attribute)
            if key not in keys and not any(k.startswith(key + ".") for k in keys):
                bad.append(f"{where}:{line}: {key} ({text!r})")
    assert not bad, "hints naming config keys the schema lacks:\n" + "\n".join(bad)
