"""`embedctl prebatch`: token cache + labels -> pre-batched format (runner: embedctl.commands.prebatch)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("prebatch")(prebatch)


@handle_errors
def prebatch(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    input: Optional[str] = typer.Option(None, "--input", "-i", help="prebatch.input: token cache folder."),
    qrels: Optional[str] = typer.Option(None, "--qrels", help="prebatch.qrels: qrels, pairs or triples file."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="prebatch.output: folder for batch_%08d/."),
    queries_per_batch: Optional[int] = typer.Option(None, "--queries-per-batch", help="prebatch.queries_per_batch."),
    negatives: Optional[int] = typer.Option(None, "--negatives-per-query", "--negatives", help="prebatch.negatives_per_query (mined hard negatives)."),
    model: Optional[str] = typer.Option(None, "--mine-model", help="prebatch.mine_model."),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite", help="prebatch.overwrite."),
    on_error: Optional[str] = typer.Option(None, "--on-error", help="prebatch.on_error: fail | skip."),
    seed: Optional[int] = typer.Option(None, "--seed", help="prebatch.seed."),
) -> None:
    """Group queries and their documents into batches in the Arctic Embed pre-batched format."""
    loaded = load(args, {
        "prebatch.input": input, "prebatch.qrels": qrels, "prebatch.output": output,
        "prebatch.queries_per_batch": queries_per_batch, "prebatch.negatives_per_query": negatives,
        "prebatch.mine_model": model, "prebatch.overwrite": overwrite,
        "prebatch.on_error": on_error, "prebatch.seed": seed,
    })
    from embedctl.commands import prebatch as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded)
