"""`embedctl evaluate`: trec_eval metrics of one ranking (a table) or several side by side."""

from __future__ import annotations

from collections.abc import Sequence

from embedctl.errors import EmbedctlError
from embedctl.eval.evaluate import evaluate_files, print_comparison, print_metrics
from embedctl.eval.sniff import file_kind


def run(runs: Sequence[str], qrels: str, measures: Sequence[str] | None = None, as_json: bool = False) -> None:
    """Print the metrics of ``runs`` against ``qrels`` (stdout: a rich table, or JSON). ``--run`` and
    ``--qrels`` swapped (a ranking given as qrels, qrels as a run) are named before any reading."""
    check_not_swapped(runs, qrels)
    if len(runs) == 1:
        print_metrics(evaluate_files(runs[0], qrels, measures), as_json=as_json)
        return
    print_comparison({run: evaluate_files(run, qrels, measures) for run in runs}, as_json=as_json)


def check_not_swapped(runs: Sequence[str], qrels: str) -> None:
    if file_kind(qrels) != "ranking":
        return
    swapped = [r for r in runs if file_kind(r) == "qrels"]
    if swapped:
        raise EmbedctlError(
            f"--run and --qrels look swapped: --qrels {qrels} holds a ranking (rows with a rank and a score) and "
            f"--run {swapped[0]} holds relevance labels",
            hint=f"embedctl evaluate --run {qrels} --qrels {swapped[0]}", exit_code=2)
    raise EmbedctlError(
        f"--qrels {qrels} holds a ranking (rows with a rank and a score), not relevance labels",
        hint="pass the ranking as --run and the qrels (`qid 0 docid rel` or BEIR qrels/test.tsv) as --qrels",
        exit_code=2)
