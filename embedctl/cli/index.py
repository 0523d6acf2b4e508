"""`embedctl index`: build a PLAID or dense index (runner: embedctl.commands.index)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("index")(index)


@handle_errors
def index(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    collection: Optional[str] = typer.Option(None, "--collection", "-c", help="index.collection: TSV, corpus.jsonl, parquet or token cache."),
    name: Optional[str] = typer.Option(None, "--name", help="index.name."),
    model: Optional[str] = typer.Option(None, "--model", help="model.name_or_path."),
    kind: Optional[str] = typer.Option(None, "--kind", help="index.kind: plaid | dense (default by model kind)."),
    nbits: Optional[int] = typer.Option(None, "--nbits", help="index.nbits: 1, 2 or 4."),
    root: Optional[str] = typer.Option(None, "--root", help="index.root: folder holding indexes."),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite", help="index.overwrite."),
) -> None:
    """Encode a collection and build a compressed PLAID index or a dense faiss index."""
    loaded = load(args, {
        "index.collection": collection, "index.name": name, "model.name_or_path": model, "index.kind": kind,
        "index.nbits": nbits, "index.root": root, "index.overwrite": overwrite,
    })
    from embedctl.commands import index as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded)
