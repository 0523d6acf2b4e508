"""`embedctl evaluate`: trec_eval metrics of a ranking (engine: embedctl.eval)."""

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
    from embedctl.eval.evaluate import evaluate_files, print_comparison, print_metrics

    if len(runs) == 1:
        print_metrics(evaluate_files(runs[0], qrels, measures), as_json=as_json)
        return
    print_comparison({run: evaluate_files(run, qrels, measures) for run in runs}, as_json=as_json)
