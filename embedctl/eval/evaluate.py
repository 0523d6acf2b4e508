"""`embedctl evaluate` engine: read a ranking and qrels, compute metrics, print a table or JSON."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from rich.table import Table

from embedctl.errors import EmbedctlError
from embedctl.eval.coverage import check_qrels_coverage, note_what_cannot_be_known
from embedctl.eval.io import read_qrels, read_run
from embedctl.eval.metrics import evaluate_run, measures_with_defaults, parse_measure
from embedctl.util.atomic import json_text
from embedctl.util.console import printable, stderr_console, stdout_console
from embedctl.util.tables import print_table


def evaluate_files(run_url: str, qrels_url: str, measures: Sequence[str] | None = None) -> dict[str, float]:
    """Metrics of the ranking file ``run_url`` against ``qrels_url``: the 4 defaults plus ``measures``.

    Raises EmbedctlError when no ranked query appears in the qrels (usually the wrong qrels file).
    """
    wanted = measures_with_defaults(measures)
    _check_measures(wanted)
    qrels = read_qrels(qrels_url)
    run = read_run(run_url)
    return evaluate_loaded(run, qrels, wanted, run_name=run_url, qrels_name=qrels_url)


def _check_measures(measures: Sequence[str]) -> None:
    for m in measures:  # fail on a misspelt measure before reading big files
        parse_measure(m)


def evaluate_loaded(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                    measures: Sequence[str], *, run_name: str = "the ranking",
                    qrels_name: str = "the qrels",
                    documents: Collection[str] | Callable[[str], bool] | None = None,
                    documents_name: str = "the index") -> dict[str, float]:
    """evaluate_run with checks that the ranking and the qrels share queries and that the qrels' relevant
    documents exist (in ``documents``, the index's ids, when given; else somewhere in the ranking):
    embedctl.eval.coverage. Notes unranked queries."""
    shared = set(run) & set(qrels)
    if not shared:
        sample_run, sample_qrels = sorted(run)[:3], sorted(qrels)[:3]
        raise EmbedctlError(
            f"none of the {len(run)} queries in {run_name} appear in {qrels_name} "
            f"(ranking ids e.g. {sample_run}, qrels ids e.g. {sample_qrels})",
            hint="check that the ranking and the qrels come from the same query set and split",
        )
    if documents is not None:
        check_qrels_coverage(qrels, documents, where=documents_name, qrels_name=qrels_name)
    else:  # no index at hand: a ranking holding none of the relevant documents is another id space
        ranked = {doc for hits in run.values() for doc in hits}
        check_qrels_coverage(qrels, ranked, where=f"any ranking of {run_name}", qrels_name=qrels_name,
                             warn_below=None)
    missing = len(set(qrels) - shared)
    if missing:
        stderr_console().print(f"note: {missing} of {len(qrels)} judged queries have no ranking; they count as 0",
                               markup=False)
    metrics = evaluate_run(run, qrels, measures)
    size = None if documents is None or callable(documents) else len(documents)
    note_what_cannot_be_known(run, qrels, list(metrics), run_name=run_name, qrels_name=qrels_name,
                              collection_size=size)
    return metrics


def print_metrics(metrics: Mapping[str, float], *, as_json: bool = False, title: str | None = None) -> None:
    """Print metrics as a rich table (stdout) or as one JSON object."""
    if as_json:
        print(json_text({k: round(float(v), 6) for k, v in metrics.items()}))
        return
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}")
    stdout_console().print(table)


def print_comparison(metrics_by_run: Mapping[str, Mapping[str, float]], *, as_json: bool = False) -> None:
    """Several rankings on the same qrels: one row per run, one column per measure (JSON: run -> metrics)."""
    if as_json:
        print(json_text({run: {k: round(float(v), 6) for k, v in m.items()} for run, m in metrics_by_run.items()}))
        return
    measures = list(next(iter(metrics_by_run.values())))
    # measures are never cut; a long run name is shortened in the middle (its file name stays readable);
    # TSV when stdout is not a terminal (embedctl.util.tables); printable(): a file name is no escape sequence
    print_table(("run", *measures), [(printable(run), *(f"{m[name]:.4f}" for name in measures))
                                     for run, m in metrics_by_run.items()],
                keep=measures, right=measures, shorten=("run",))
