"""Generate docs/troubleshooting.md: every error message embedctl can raise, where, and its fix.

    .venv/bin/python docs/make_troubleshooting.py

It reads the source (ast): each `raise SomethingError(message, ..., hint=...)` becomes one row; f-string
fields show as `{...}`. Config-schema problems (unknown keys, wrong types) are described once at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ERROR_NAMES = ("EmbedctlError", "InputError", "ConfigError", "NotImplementedYet")

HEADER = """# Troubleshooting

Every error embedctl reports is a message that names the file and line (or the dotted config key), what
was expected, and how to fix it; the command exits non-zero (2 for config and usage errors, 1 for bad
input) and prints no traceback (`EMBEDCTL_DEBUG=1` prints one). This page is generated from the source
by `docs/make_troubleshooting.py`, so it lists every message the code can raise; `{...}` stands for the
value filled in at run time.

## Config problems (exit code 2)

| message | fix |
|---|---|
| unknown key `a.b` (set in FILE); did you mean `a.c`? | rename the key; `embedctl config keys a` lists the valid ones |
| `a.b` (set ...): expected an integer / a number / true or false / a string / a list of ..., got ... | give a value of that type (YAML: `1e-4`, `true`, `[1, 2]`, `null`) |
| `a.b`: expected one of x, y; got 'z'; did you mean `x`? | pick one of the listed values |
| override `x` is not of the form key=value | write `dotted.key=value`, e.g. `train.max_steps=10` |
| config file not found: FILE | check the path (relative to the current folder) |
| recipe layer `group/name` named in FILE was not found; looked for: ... | create `recipes/group/name.yaml`, fix the name, or set `EMBEDCTL_RECIPES` |
| recipe layers form a cycle: a -> b -> a | remove one of the `defaults` entries that close the loop |
| FILE: not valid YAML | fix the YAML syntax at the position the message gives |
| `a.b` (set on the command line): the value in `a.b=[1,2` is not valid YAML (...) | write the value as YAML (`a.b=[1,2]`), or quote it |
| `a.b` (set ...): expected > 0 / >= 0 / in [lo, hi], got ...; fix: set a.b to ... | every numeric key has a range (`embedctl config keys` shows it); NaN and infinity are refused everywhere |

## The environment (exit code 1, or 141 for a closed pipe)

A failure of the machine rather than of embedctl is reported by the CLI (embedctl.cli.oserrors) as one
line naming the path (or the command's output when the system gives none) and the fix, also when torch,
safetensors or pyarrow wrap it in their own error:

| message | fix |
|---|---|
| PATH: no space left on the device. What was written so far stays and the same command resumes ... | free space there (df -h shows it), or write to another disk |
| PATH: the disk quota is exceeded / the file grew beyond what the file system allows | free space, write to another disk, or raise the limit (ulimit -f) |
| PATH: the file system is read-only | choose an output on a writable disk |
| PATH: permission denied / operation not permitted | choose a folder you can write (or read), or fix its permissions |
| PATH: no such file or folder / a part of the path is a file, not a folder / a file of that name is in the way of a folder | check the path, choose another one, or move that file |
| PATH: too many open files | raise the limit (ulimit -n) |

When the reader of stdout goes away (`embedctl search ... --json | head -1`) the command stops quietly
with exit status 141 (128 + SIGPIPE, what a shell reports for any Unix tool in that case).

"""


def _render(node: ast.AST | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{...}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _render(node.left) + _render(node.right)
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return "; ".join(_render(e) for e in node.elts)
    return "{...}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def collect() -> dict[str, list[tuple[str, str]]]:
    rows: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((REPO / "embedctl").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name not in ERROR_NAMES or not node.exc.args:
                continue
            message = _render(node.exc.args[0])
            if not message.replace("{...}", "").strip(" .:;"):
                continue  # a message built elsewhere (e.g. a list of config problems)
            hint = next((_render(k.value) for k in node.exc.keywords if k.arg == "hint"), "")
            module = str(path.relative_to(REPO).with_suffix("")).replace("/", ".")
            rows.setdefault(module, []).append((message, hint))
    return rows


def main() -> None:
    lines = [HEADER, "## Everything else, by module\n"]
    for module, items in collect().items():
        lines += [f"### `{module}`\n", "| message | how to fix |", "|---|---|"]
        seen = set()
        for message, hint in items:
            if (message, hint) in seen:
                continue
            seen.add((message, hint))
            lines.append(f"| {_cell(message)} | {_cell(hint) or 'see the message'} |")
        lines.append("")
    out = REPO / "docs" / "troubleshooting.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
