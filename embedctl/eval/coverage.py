"""Checks that keep metrics honest: are the qrels' documents there at all, and was the ranking deep enough?

- :func:`check_qrels_coverage`: how many of the qrels' relevant documents exist where they could be found
  (the index for ``search --qrels``; the ranking for ``evaluate``). Reported when not all, a warning under
  ``WARN_BELOW`` (index only), an error at zero: qrels of another collection (other document ids) would
  otherwise give all-zero metrics and exit 0.
- :func:`measure_depth` / :func:`retrieval_depth` / :func:`measures_within`: the ranking depth a measure
  reads (Recall@100 needs 100 hits per query), so ``search --qrels`` retrieves enough for every reported
  measure, or leaves out a measure deeper than an explicit ``-k``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence

from embedctl.errors import EmbedctlError
from embedctl.eval.metrics import parse_measure
from embedctl.util.console import stderr_console

WARN_BELOW = 0.5
_TREC_DEPTH = re.compile(r"^(?:P|recall|ndcg_cut|map_cut|success|relative_P)_(\d+)$")
_AT_DEPTH = re.compile(r"@(\d+)$")


def relevant_documents(qrels: Mapping[str, Mapping[str, int]]) -> set[str]:
    return {doc for judged in qrels.values() for doc, rel in judged.items() if rel > 0}


def check_qrels_coverage(qrels: Mapping[str, Mapping[str, int]], present: Collection[str] | Callable[[str], bool],
                         *, where: str, qrels_name: str, warn_below: float | None = WARN_BELOW) -> float:
    """Share of the qrels' relevant documents found in ``present`` (a set of ids, or a membership test).

    Prints ``qrels: N of M relevant documents are in WHERE`` when not all are, a warning under
    ``warn_below`` (None: print nothing, for a ranking's top k); raises EmbedctlError when none are. Returns the share (1.0 when the qrels judge none).
    """
    relevant = relevant_documents(qrels)
    if not relevant:
        return 1.0
    contains = present if callable(present) else present.__contains__
    found = sum(1 for doc in relevant if contains(doc))
    share = found / len(relevant)
    if found == 0:
        sample = sorted(relevant)[:3]
        raise EmbedctlError(
            f"none of the {len(relevant)} relevant documents of {qrels_name} (e.g. {sample}) are in {where}: "
            "every metric would be 0",
            hint="use the qrels of the collection this index was built from (the document ids must match: "
                 "the corpus ids, not row numbers), or point --index at the right index")
    if found < len(relevant) and warn_below is not None:  # None: a ranking, which holds only the top k
        console = stderr_console()
        line = f"qrels: {found} of {len(relevant)} relevant documents ({share:.0%}) are in {where}"
        if share < warn_below:
            console.print(f"warning: {line}; the others can never be retrieved, so the metrics are low bounds "
                          "(are these the qrels of this collection?)", markup=False)
        else:
            console.print(f"note: {line}", markup=False)
    return share


def measure_depth(name: str) -> int | None:
    """How many hits per query ``name`` reads: 100 for Recall@100 / recall_100 / MRR@100; None when it reads
    the whole ranking (map, bpref, recip_rank, ...)."""
    measure = parse_measure(name)
    if measure.cut is not None:
        return measure.cut
    match = _TREC_DEPTH.match(measure.trec)
    return int(match.group(1)) if match else None


def retrieval_depth(measures: Sequence[str]) -> int | None:
    """The largest depth among ``measures`` (None when none has one)."""
    depths = [d for d in (measure_depth(m) for m in measures) if d is not None]
    return max(depths) if depths else None


def measures_within(measures: Sequence[str], k: int) -> tuple[list[str], list[str]]:
    """(measures whose depth is at most ``k`` or unbounded, measures that read deeper than ``k``)."""
    kept, dropped = [], []
    for m in measures:
        depth = measure_depth(m)
        (dropped if depth is not None and depth > k else kept).append(m)
    return kept, dropped


def result_depth(key: str) -> int | None:
    """The depth a reported metric reads (``Recall@100`` -> 100, ``P_20`` -> 20), None for whole-ranking ones."""
    match = _AT_DEPTH.search(key) or _TREC_DEPTH.match(key)
    return int(match.group(1)) if match else None


def note_what_cannot_be_known(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                              names: Sequence[str], *, run_name: str, qrels_name: str,
                              collection_size: int | None = None) -> list[str]:
    """Warn (stderr) about figures the inputs cannot support, and return the lines: a measure reading deeper
    than any query's ranking (Recall@100 of a top-10 run: hits never retrieved count as misses), queries
    ranked with fewer hits than a measure reads, judged queries with no relevant label (they score 0 in
    every measure and pull every mean down). ``collection_size`` (the index's documents, when known): a
    ranking of the whole collection misses nothing, so a deeper measure is exact there, not a lower bound."""
    lines: list[str] = []
    ranked = [len(run[q]) for q in qrels if q in run]
    deepest = max(ranked, default=0)
    whole = collection_size if collection_size is not None else float("inf")
    deep = [(n, d) for n in names if (d := result_depth(n)) is not None]
    beyond = [n for n, d in deep if d > deepest] if deepest < whole else []
    if beyond and ranked:
        lines.append(f"warning: {', '.join(beyond)} read(s) deeper than {run_name}, which holds at most {deepest} "
                     "hit(s) per query: hits never retrieved count as not relevant, so these figures are lower "
                     f"bounds; rank deeper (e.g. `embedctl search -k {max(d for _, d in deep)}`) or leave them out")
    within = [d for n, d in deep if d <= deepest]
    if within:
        depth = max(within)
        short = sum(1 for n in ranked if n < depth and n < whole)
        if short:
            lines.append(f"note: {short} of {len(ranked)} ranked queries have fewer than {depth} hits; the missing "
                         "hits count as not relevant")
    unlabelled = [q for q, judged in qrels.items() if judged and not any(r > 0 for r in judged.values())]
    if unlabelled:
        lines.append(f"warning: {len(unlabelled)} of {len(qrels)} judged queries in {qrels_name} have no relevant "
                     f"document (e.g. {sorted(unlabelled)[:3]}): they score 0 in every measure and lower every "
                     "mean; drop them from the qrels or check the relevance column")
    console = stderr_console()
    for line in lines:
        console.print(line, markup=False)
    return lines
