"""`embedctl index`: build a PLAID or dense index; `embedctl index add|delete|compact|info` change or describe
one (runner: embedctl.commands.index; the subcommand is the runner's ``operation``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import click
import typer
from typer.core import TyperGroup

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


class _BuildOrSubcommand(TyperGroup):
    """``embedctl index [CONFIG] [k=v] --collection X`` builds (as before the subcommands existed);
    ``embedctl index add ...`` runs a subcommand. The build's positional CONFIG/overrides would swallow a
    subcommand's name, so a first argument naming a subcommand skips the build's own parsing. A group stops
    reading options at its first positional argument; the build reads them anywhere, as every command does
    (``embedctl index CFG --collection X``)."""

    allow_interspersed_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            click.Command.parse_args(self, ctx, [])  # the build's options at their defaults
            ctx._protected_args, ctx.args = args[:1], args[1:]  # type: ignore[attr-defined]
            return ctx.args
        return click.Command.parse_args(self, ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[CONFIG] [KEY=VALUE]... [OPTIONS] | add|delete|compact|info ...")


app = typer.Typer(cls=_BuildOrSubcommand, invoke_without_command=True, no_args_is_help=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="index")


def _index_flags(index: Optional[str]) -> dict[str, Any]:
    if not index:
        return {}
    path = Path(os.path.abspath(index))  # `--index x/..` names a folder; its name is never `..`
    return {"index.root": str(path.parent), "index.name": path.name}


def _run(args: Optional[list[str]], flags: dict[str, Any], operation: str = "build", **kw: Any) -> None:
    loaded = load(args, flags)
    from embedctl.commands import index as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded, operation, **kw)


@app.callback()
@handle_errors
def index(
    ctx: typer.Context,
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    collection: Optional[str] = typer.Option(None, "--collection", "-c", help="index.collection: TSV, corpus.jsonl, parquet or token cache."),
    name: Optional[str] = typer.Option(None, "--name", help="index.name."),
    model: Optional[str] = typer.Option(None, "--model", help="model.name_or_path."),
    kind: Optional[str] = typer.Option(None, "--kind", help="index.kind: plaid | dense (default by model kind)."),
    nbits: Optional[int] = typer.Option(None, "--nbits", help="index.nbits: 1, 2 or 4."),
    root: Optional[str] = typer.Option(None, "--root", help="index.root: folder holding indexes."),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite", help="index.overwrite."),
) -> None:
    """Encode a collection and build a compressed PLAID index or a dense faiss index (subcommands change one)."""
    if ctx.invoked_subcommand is not None:
        return
    _run(args, {"index.collection": collection, "index.name": name, "model.name_or_path": model,
                "index.kind": kind, "index.nbits": nbits, "index.root": root, "index.overwrite": overwrite})


INDEX_HELP = "The index folder (index.root/index.name); default: LATEST under index.root."


@app.command("add")
@handle_errors
def add(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    index: Optional[str] = typer.Option(None, "--index", "-i", help=INDEX_HELP),
    collection: Optional[str] = typer.Option(None, "--collection", "-c", help="index.collection: the documents to add (TSV, JSONL, parquet)."),
) -> None:
    """Encode only the new documents and make them searchable; an existing id with another text is replaced."""
    _run(args, {"index.collection": collection, **_index_flags(index)}, "add")


@app.command("delete")
@handle_errors
def delete(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    index: Optional[str] = typer.Option(None, "--index", "-i", help=INDEX_HELP),
    ids: Optional[str] = typer.Option(None, "--ids", help="A file of ids to delete, one per line."),
    id_: Optional[list[str]] = typer.Option(None, "--id", help="An id to delete (repeatable)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1, deleting nothing, when an id is not in the index."),
) -> None:
    """Delete documents by id: they never appear in results again (unknown ids are reported)."""
    _run(args, _index_flags(index), "delete", ids=list(id_ or []), ids_file=ids, strict=strict)


@app.command("compact")
@handle_errors
def compact(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    index: Optional[str] = typer.Option(None, "--index", "-i", help=INDEX_HELP),
) -> None:
    """Merge the segments and drop deleted documents (no re-encoding): size and speed of a fresh build."""
    _run(args, _index_flags(index), "compact")


@app.command("info")
@handle_errors
def info(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    index: Optional[str] = typer.Option(None, "--index", "-i", help=INDEX_HELP),
    as_json: bool = typer.Option(False, "--json", help="JSON on stdout (documents, deleted, segments, bytes, version, ...)."),
    verify: bool = typer.Option(False, "--verify", help="Re-read every file against its recorded sha256 (exit 1 on a mismatch)."),
) -> None:
    """Documents, deleted rows, segments, size, model, backend and version of an index."""
    _run(args, _index_flags(index), "info", as_json=as_json, verify=verify)
