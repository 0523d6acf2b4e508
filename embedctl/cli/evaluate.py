"""`embedctl evaluate`: trec_eval metrics of a ranking (runner: embedctl.commands.evaluate)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import handle_errors


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)


@handle_errors
def evaluate(
    runs: list[str] = typer.Option(..., "--run", help="Ranking: ColBERT TSV (qid pid rank score) or TREC run file; repeat to compare runs side by side."),
    qrels: str = typer.Option(..., "--qrels", help="Qrels: TREC (qid 0 docid rel) or BEIR TSV with header."),
    measures: Optional[list[str]] = typer.Option(None, "--measure", "-m", help="Extra trec_eval measures, e.g. map, P_5."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Compute nDCG@10, MRR@10, Recall@10/100 (and any measure asked for) with pytrec_eval."""
    from embedctl.commands import evaluate as command  # here, not at the top: see embedctl.cli.common

    command.run(runs, qrels, measures, as_json=as_json)
