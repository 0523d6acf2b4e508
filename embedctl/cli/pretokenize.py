"""`embedctl pretokenize`: text -> token cache (runner: embedctl.commands.pretokenize)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("pretokenize")(pretokenize)


@handle_errors
def pretokenize(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    input: Optional[str] = typer.Option(None, "--input", "-i", help="pretokenize.input: BEIR folder, .tsv, .jsonl or .parquet (local or URL)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="pretokenize.output: token cache folder."),
    model: Optional[str] = typer.Option(None, "--model", help="model.name_or_path: whose tokenizer to use."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="model.doc_max_length (and query length for a BEIR folder's queries, if --query-max-length is not given)."),
    query_max_length: Optional[int] = typer.Option(None, "--query-max-length", help="model.query_max_length."),
    workers: Optional[int] = typer.Option(None, "--workers", help="pretokenize.workers."),
    num_shards: Optional[int] = typer.Option(None, "--num-shards", help="pretokenize.num_shards."),
    shard_index: Optional[int] = typer.Option(None, "--shard-index", help="pretokenize.shard_index."),
    side: Optional[str] = typer.Option(None, "--side", help="pretokenize.side: documents | queries (single files)."),
    on_error: Optional[str] = typer.Option(None, "--on-error", help="pretokenize.on_error: fail | skip."),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite", help="pretokenize.overwrite: rebuild a mismatched cache."),
) -> None:
    """Tokenize a text collection into a sharded, resumable, deterministic token cache."""
    loaded = load(args, {
        "pretokenize.input": input, "pretokenize.output": output, "model.name_or_path": model,
        "model.doc_max_length": max_length, "model.query_max_length": query_max_length,
        "pretokenize.workers": workers, "pretokenize.num_shards": num_shards,
        "pretokenize.shard_index": shard_index, "pretokenize.side": side,
        "pretokenize.on_error": on_error, "pretokenize.overwrite": overwrite,
    })
    from embedctl.commands import pretokenize as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded)
