"""`embedctl evaluate`: trec_eval metrics of one ranking (a table) or several side by side."""

from __future__ import annotations

from collections.abc import Sequence

from embedctl.eval.evaluate import evaluate_files, print_comparison, print_metrics


def run(runs: Sequence[str], qrels: str, measures: Sequence[str] | None = None, as_json: bool = False) -> None:
    """Print the metrics of ``runs`` against ``qrels`` (stdout: a rich table, or JSON)."""
    if len(runs) == 1:
        print_metrics(evaluate_files(runs[0], qrels, measures), as_json=as_json)
        return
    print_comparison({run: evaluate_files(run, qrels, measures) for run in runs}, as_json=as_json)
