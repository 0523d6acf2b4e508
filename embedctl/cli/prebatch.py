"""`embedctl prebatch`: token cache + labels -> pre-batched format (engine: embedctl.data.prebatch)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load, not_implemented


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
) -> None:
    """Group queries and their documents into batches in the Arctic Embed pre-batched format."""
    load(args, {
        "prebatch.input": input, "prebatch.qrels": qrels, "prebatch.output": output,
        "prebatch.queries_per_batch": queries_per_batch, "prebatch.negatives_per_query": negatives,
        "prebatch.mine_model": model, "prebatch.overwrite": overwrite,
    })
    not_implemented("prebatch", "issue 3: data pipeline")
