"""Generate docs/troubleshooting.md: every error message embedctl can raise, where, and its fix.

    .venv/bin/python docs/make_troubleshooting.py

It reads the source (ast): each `raise SomethingError(message, ..., hint=...)` becomes one row; f-string
fields show as `{...}`. Config-schema problems (unknown keys, wrong types) are described once at the top.
Rows are grouped by the command a user runs when they meet them (COMMANDS: module prefix -> command) and
sorted by message within a command. Every row has a concrete fix: the raise's ``hint``, else the fix the
message itself states ("...; use X", "pass --flag ..."), else the entry of FIXES (a message prefix ->
its fix); a row with none fails the generator (and tests/test_hints.py), so a new error cannot ship
without one.
"""

from __future__ import annotations

import ast
import re
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


# the command a user runs when a module's error reaches them; the first matching prefix wins
COMMANDS = (
    ("embedctl.cli.", "every command"), ("embedctl.config.", "every command"), ("embedctl.commands.config", "config"),
    ("embedctl.data.pretokenize", "pretokenize"), ("embedctl.data.sources", "pretokenize"),
    ("embedctl.data.token_cache", "pretokenize"), ("embedctl.models.tokenizer_cache", "pretokenize"),
    ("embedctl.data.inspect", "data inspect"),
    ("embedctl.prebatch.", "prebatch"), ("embedctl.data.relations", "prebatch"), ("embedctl.data.compose", "prebatch"),
    ("embedctl.data.batch_writer", "prebatch"), ("embedctl.data.formats", "prebatch"),
    ("embedctl.train.", "train"), ("embedctl.data.batches", "train"),
    ("embedctl.commands.index", "index"), ("embedctl.index.", "index"),
    ("embedctl.commands.search", "search"), ("embedctl.search.", "search"), ("embedctl.api", "search"),
    ("embedctl.commands.evaluate", "evaluate"), ("embedctl.eval.", "evaluate"), ("embedctl.util.qrels", "evaluate"),
    ("embedctl.models.", "every command that loads a model (prebatch, train, index, search)"),
    ("embedctl.", "every command"),
)
ORDER = ("config", "pretokenize", "prebatch", "data inspect", "train", "index", "search", "evaluate",
         "every command that loads a model (prebatch, train, index, search)", "every command")

# fixes of messages raised without a hint and stating none themselves (prefix of the rendered message -> fix)
FIXES = {
    "{...} bytes, recorded {...} (damaged or replaced)": "the file was changed after it was written: rebuild what holds it (`embedctl pretokenize ... --overwrite` for a token cache, `embedctl prebatch CFG --overwrite` for batches)",
    "content differs from the recorded sha256 (damaged or replaced)": "the file was changed after it was written: rebuild what holds it (`embedctl pretokenize ... --overwrite` for a token cache, `embedctl prebatch CFG --overwrite` for batches)",
    "{...} is damaged: {...}{...}": "restore the named files from a copy, or rebuild (`embedctl index ... --overwrite`; for a checkpoint, resume from the previous one the message names)",
    "no config files given and none found under ./configs": "pass the config files: `embedctl config validate configs/x.yaml`, or run it from the checkout",
    "recipe layer `{...}` named in": "create `recipes/GROUP/NAME.yaml`, fix the name in `defaults`, or set `EMBEDCTL_RECIPES` to your recipes folder",
    "config file not found": "check the path (relative to the current folder): `ls configs/`",
    "{...}: expected a mapping of sections at the top level": "write the file as sections of keys, e.g. `train:` then `  max_steps: 10`",
    "recipe layers form a cycle": "remove one of the `defaults` entries that close the loop",
    "{...}{...}: not valid YAML": "fix the YAML at the line and column given (the message says what and where it began)",
    "`model.name_or_path`: no usable tokenizer in": "copy the tokenizer files (the one named, or all: tokenizer.json, vocab.txt ...) again from the base model",
    "`model.name_or_path`: the tokenizer in {...} cannot tokenize text": "copy the tokenizer files (the one named: an empty vocab.txt ...) again from the base model",
    "{...}: not valid YAML": "fix the YAML syntax at the line and column given (`python -c 'import yaml,sys; yaml.safe_load(open(sys.argv[1]))' FILE` shows it)",
    "relations.parquet names {...} ids not in the batch": "the batch folder is damaged: rebuild it with `embedctl prebatch CFG --overwrite`",
    "metadata.json says format {...}, expected {...}": "rebuild the folder with this embedctl (`embedctl prebatch CFG --overwrite`)",
    "{...} lacks columns {...}": "rebuild the folder with `embedctl prebatch CFG --overwrite` (or `pretokenize ... --overwrite` for a token cache)",
    "`data.split_factor` must be >= 1": "set `data.split_factor=1` (or more to split each stored batch)",
    "the pre-batched folder holds no batches": "rerun `embedctl prebatch CFG --overwrite`; check that the qrels name queries of the token cache (`embedctl data inspect TOKENS`)",
    "cannot read {...}: {...}": "check the path and permissions (`ls -l PATH`); for a URL, the credentials (`pip install 'embedctl[s3]'` for s3://)",
    "cannot read: {...}: {...}": "check the path and permissions (`ls -l PATH`); for a URL, the credentials (`pip install 'embedctl[s3]'` for s3://)",
    "no such folder": "check the path: `ls` the folder named before the colon",
    "`pretokenize.rows_per_chunk` and `pretokenize.workers` must be >= 1": "set `pretokenize.workers=1` (or more) and leave `pretokenize.rows_per_chunk` at its default",
    "unknown relations format": "set `prebatch.relations_format` to auto, qrels, pairs or triples",
    "not a readable parquet file": "check the file is parquet (`python -c 'import pyarrow.parquet as p,sys; print(p.read_schema(sys.argv[1]))' FILE`) or convert it to JSONL",
    "unknown text format": "name the file .tsv, .jsonl or .parquet (optionally .gz/.zst), or pass a BEIR folder",
    "not an embedctl token cache": "pass the folder `embedctl pretokenize` wrote (`--output`), or rebuild it with `--overwrite`",
    "say which side to open": "pass the side's folder: TOKENS/documents or TOKENS/queries",
    "rank {...} is not an integer": "the ranking's third column is the rank: write rankings with `embedctl search --queries Q --output R`; if the files are swapped, pass the ranking as --run and the qrels as --qrels",
    "score {...} is not a finite number": "rewrite the ranking (`embedctl search --queries Q --output R`); drop rows whose score is NaN or inf",
    "expected {...} fields like the first line": "give every row the same columns as the first (tabs or spaces, not both)",
    "expected a ColBERT ranking": "pass a ranking (`qid pid rank score` or a TREC run) as --run and the qrels as --qrels",
    "measure {...}: the depth must be at least 1": "write the measure with a depth of 1 or more, e.g. `ndcg_cut_10`, `recall_100`",
    "measure {...} is not accepted by trec_eval": "use a trec_eval measure name, e.g. `map`, `P_5`, `ndcg_cut_10`, `recall_100`",
    "run query {...}: score of document {...} is not a finite number": "rewrite the ranking; drop rows whose score is NaN or inf",
    "the token cache holds no documents": "pretokenize the documents side: `embedctl pretokenize CFG --input DOCS --side documents`",
    "dense index expects vectors of shape": "encode with the index's own model: `embedctl index add --index DIR ...` uses it; do not mix models",
    "unknown dense index type": "the index's meta.json is from another version or damaged: rebuild with `embedctl index CFG --overwrite`",
    "{...}: unknown index kind": "the folder is not an embedctl index of this version: rebuild with `embedctl index CFG index.overwrite=true`",
    "{...} documents and {...} digests for a build of": "the build's files disagree: rebuild with `embedctl index CFG index.overwrite=true`",
    "the Stanford ColBERT layout holds ColBERT models only": "save a bi-encoder with `encoder.save(PATH)` (sentence-transformers layout) instead",
    "the PyLate layout holds ColBERT models only": "save a bi-encoder with `encoder.save(PATH)` (sentence-transformers layout) instead",
    "`prebatch.queries_per_batch` must be >= 1": "set `prebatch.queries_per_batch` (`--queries-per-batch`) to 1 or more",
    "no query has a positive label": "check the qrels name the token cache's ids (`embedctl data inspect TOKENS`) and hold grades > 0",
    "`search.k` = {...}: must be at least 1": "pass `-k 10` (or more)",
    "engine.timeout_s={...}: must be positive": "set `engine.timeout_s=1800` (seconds)",
    "train.max_steps={...}: must be at least 1": "set `train.max_steps=1` or more",
    "not a usable path or URL": "give a local path or an fsspec URL (`s3://bucket/key`, `https://...`)",
    "expected a file, found a folder": "name the file inside the folder (e.g. FOLDER/corpus.jsonl)",
    "--queries needs --output FILE": "add `--output run.tsv` (the ranking), or `--qrels QRELS` to print the metrics only",
    "{...}: `defaults` must be a list": "write `defaults: [model/minilm, optim/adamw_warmup]` (a YAML list of recipe names)",
    "`index.dense_type` = {...}": "set `index.dense_type` to flat, ivf or hnsw",
    "`index.drift_action` = {...}": "set `index.drift_action` to warn, expand or ignore",
    "the pre-batched folder is damaged": "rebuild it: `embedctl prebatch CFG --overwrite` (the same command that wrote it)",
    "missing file": "rerun the command that wrote the folder (`embedctl pretokenize` / `prebatch` / `index` with --overwrite)",
    "{...} of {...} files fail the sha256 check": "rebuild the folder with the command that wrote it (--overwrite); the files listed changed after writing",
    "{...}: unreadable {...}": "the file is damaged or was written by something else: rerun the command that wrote it with --overwrite",
    "{...}: missing {...}": "rerun the command that wrote the folder (with --overwrite); a killed write leaves no half file, only a missing one",
    "{...}: {...}: not a readable {...}": "the file is damaged or was written by something else: rerun the command that wrote it with --overwrite",
    "cannot read (corrupt or truncated file?)": "fetch or write the file again; check `gzip -t FILE` / `zstd -t FILE` for a compressed one",
}
_STATED = re.compile(r"(?:\(fix: (?P<paren>[^)]*)\)|[;:] (?P<verb>(?:use|pass|set|give|write|add|rerun|run) .+)$)")


def fix_of(message: str, hint: str) -> str:
    """The row's fix: the hint, else what the message says to do, else FIXES; "" when none."""
    if hint.replace("{...}", "").strip(" .;:"):
        return hint
    stated = _STATED.search(message)
    if stated:
        return stated["paren"] or stated["verb"]
    return next((fix for prefix, fix in FIXES.items() if message.startswith(prefix)), "")


def command_of(module: str) -> str:
    return next(command for prefix, command in COMMANDS if module.startswith(prefix) or module + "." == prefix)


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


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments (hints kept in a constant, e.g. REBUILD_HINT)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _render(node.value)
            if text.replace("{...}", "").strip():
                out[node.targets[0].id] = text
    return out


def collect() -> dict[str, list[tuple[str, str]]]:
    trees = {path: ast.parse(path.read_text()) for path in sorted((REPO / "embedctl").rglob("*.py"))}
    every: dict[str, set[str]] = {}
    local = {path: _constants(tree) for path, tree in trees.items()}
    for consts in local.values():
        for name, text in consts.items():
            every.setdefault(name, set()).add(text)
    rows: dict[str, list[tuple[str, str]]] = {}
    for path, tree in trees.items():
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
            hint_node = next((k.value for k in node.exc.keywords if k.arg == "hint"), None)
            hint = _render(hint_node)
            if isinstance(hint_node, ast.Name):  # a hint kept in a constant: this module's, else a unique one
                known = local[path].get(hint_node.id) or (
                    next(iter(every[hint_node.id])) if len(every.get(hint_node.id, ())) == 1 else None)
                hint = known or hint
            module = str(path.relative_to(REPO).with_suffix("")).replace("/", ".")
            rows.setdefault(module, []).append((message, hint))
    return rows


def main() -> None:
    by_command: dict[str, dict[tuple[str, str], set[str]]] = {}
    missing = []
    for module, items in collect().items():
        command = command_of(module)
        for message, hint in items:
            fix = fix_of(message, hint)
            if not fix:
                missing.append(f"{module}: {message}")
            by_command.setdefault(command, {}).setdefault((message, fix), set()).add(module)
    if missing:
        raise SystemExit("messages without a fix (add a hint= to the raise, or an entry to FIXES):\n" + "\n".join(missing))
    lines = [HEADER, "## By command\n", "Find the command you ran, then the message (sorted alphabetically; "
             "`{...}` is a value filled in at run time).\n"]
    for command in sorted(by_command, key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER)):
        lines += [f"### {command}\n", "| message | how to fix | raised in |", "|---|---|---|"]
        rows = sorted(by_command[command].items(), key=lambda kv: kv[0][0].lstrip("`{.}: ").lower())
        for (message, fix), modules in rows:
            lines.append(f"| {_cell(message)} | {_cell(fix)} | {', '.join(f'`{m}`' for m in sorted(modules))} |")
        lines.append("")
    out = REPO / "docs" / "troubleshooting.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
