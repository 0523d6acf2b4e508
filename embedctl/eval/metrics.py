"""The one metrics module: trec_eval measures through pytrec_eval, for training eval and `embedctl evaluate`.

Conventions (the same as trec_eval / BEIR / MTEB):
- a run is ``{qid: {docid: score}}``; higher scores rank first; ties are broken by docid in reverse
  lexicographic order (trec_eval's rule), here and when a run is cut at a depth;
- qrels are ``{qid: {docid: relevance}}``; relevance <= 0 is not relevant (negative labels are clamped to 0);
- every measure is a mean over the qrels' queries: a query with judgments but no ranking scores 0
  (like ``trec_eval -c``); ranked queries without judgments are ignored.

Measure names: our four defaults ``nDCG@10``, ``MRR@10``, ``Recall@10``, ``Recall@100``; the same
families at any depth (``nDCG@k``, ``MRR@k``, ``Recall@k``, ``P@k``, ``MAP@k``); and any trec_eval
measure (``map``, ``P_5``, ``P.5``, ``ndcg_cut_20``, ``recip_rank``, ``bpref``, ...), reported under the
trec_eval key (``P.5`` -> ``P_5``).

Example::

    >>> evaluate_run({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}})["MRR@10"]
    0.5
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from embedctl.errors import EmbedctlError

DEFAULT_MEASURES = ("nDCG@10", "MRR@10", "Recall@10", "Recall@100")

_AT = re.compile(r"^(ndcg|mrr|recall|p|map)@(\d+)$", re.IGNORECASE)
_FAMILY = {"ndcg": "ndcg_cut_{k}", "recall": "recall_{k}", "p": "P_{k}", "map": "map_cut_{k}"}

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class Measure:
    """One requested measure: the name we report, the pytrec_eval measure, an optional run cut."""

    name: str          # key in the result, e.g. "nDCG@10" or "P_5"
    trec: str          # pytrec_eval measure, e.g. "ndcg_cut_10"
    key: str | None    # pytrec_eval output key; None = report every key the measure produces (e.g. "P")
    cut: int | None = None   # MRR@k: recip_rank on the run cut at k per query


def parse_measure(name: str) -> Measure:
    """Map a measure name to pytrec_eval; raises EmbedctlError naming the bad measure.

    >>> parse_measure("MRR@10")
    Measure(name='MRR@10', trec='recip_rank', key='recip_rank', cut=10)
    >>> parse_measure("P.5").name
    'P_5'
    """
    import pytrec_eval

    text = name.strip()
    match = _AT.match(text)
    if match:
        family, k = match.group(1).lower(), int(match.group(2))
        if k <= 0 or k > MAX_DEPTH:
            raise EmbedctlError(f"measure {name!r}: the depth must be at least 1 and at most {MAX_DEPTH:,}",
                                hint="e.g. nDCG@10, Recall@100")
        if family == "mrr":
            return Measure(name=text, trec="recip_rank", key="recip_rank", cut=k)
        trec = _FAMILY[family].format(k=k)
        return Measure(name=text, trec=trec, key=trec)
    # `P.5` is trec_eval's `P_5`; a dot after a digit is a decimal parameter (`iprec_at_recall_0.5`)
    trec_key = re.sub(r"^([A-Za-z_]*[A-Za-z])\.", r"\1_", text)
    prefix = _known_prefix(trec_key, pytrec_eval.supported_measures)
    if prefix is not None:
        _check_parameters(name, prefix, trec_key[len(prefix) + 1:])
    if trec_key in pytrec_eval.supported_measures or prefix is not None:
        keys = _trec_keys(trec_key)
        return Measure(name=trec_key, trec=trec_key, key=trec_key if keys == (trec_key,) else None)
    known = ", ".join(DEFAULT_MEASURES) + ", nDCG@k, MRR@k, Recall@k, P@k, MAP@k, " + \
        ", ".join(sorted(pytrec_eval.supported_measures))
    raise EmbedctlError(f"unknown measure {name!r}",
                        hint=f"use one of: {known}; a trec_eval depth is written P_5 or ndcg_cut_20")


@functools.cache
def _trec_keys(trec: str) -> tuple[str, ...]:
    """The output keys pytrec_eval gives for one measure (``P`` -> P_5 ... P_1000; ``map`` -> map)."""
    import pytrec_eval

    try:
        probe = pytrec_eval.RelevanceEvaluator({"q": {"d": 1}}, {trec}).evaluate({"q": {"d": 1.0}})
    except (ValueError, TypeError) as exc:
        raise EmbedctlError(f"measure {trec!r} is not accepted by trec_eval: {exc}") from exc
    return tuple(probe["q"])


# trec_eval measures whose parameters are cutoffs (ranking depths): each must be a whole number >= 1, or
# trec_eval's C code aborts the whole process on an assertion (`-m P_0`) instead of raising; these take
# numbers of their own (recall levels, multipliers, beta, utility weights); every other measure takes none
# (`ndcg_5`, `Rndcg_5`, `success_0` abort the process as well)
MAX_DEPTH = 1_000_000_000  # trec_eval reads a cutoff into a C long; a longer one wraps round to a wrong figure
_CUT_MEASURES = ("P", "recall", "ndcg_cut", "map_cut", "success", "relative_P")
_NUMBER_MEASURES = ("iprec_at_recall", "Rprec_mult", "set_F", "utility")


def _check_parameters(name: str, measure: str, params: str) -> None:
    """Refuse parameters trec_eval would crash on: a cutoff that is not a whole number >= 1 (``P_0``,
    ``ndcg_cut_5,0``) or a parameter on a measure that takes none (``ndcg_5``)."""
    if measure == "iprec_at_recall":  # recall levels: trec_eval answers any number, 0 beyond 1
        for value in params.split(","):
            try:
                level = float(value)
            except ValueError:
                level = -1.0
            if not 0.0 <= level <= 1.0:
                raise EmbedctlError(f"measure {name!r}: the recall level {value!r} must be a number from 0 to 1",
                                    hint="e.g. iprec_at_recall_0.5 or iprec_at_recall_0.1,0.5,0.9")
        return
    if measure in _NUMBER_MEASURES:
        return
    if measure not in _CUT_MEASURES:
        raise EmbedctlError(f"measure {name!r}: {measure} takes no depth",
                            hint=f"write {measure} alone, or a cut measure such as ndcg_cut_10, P_5, recall_100")
    for value in params.split(","):
        if not value.isdigit() or not 1 <= int(value) <= MAX_DEPTH:
            raise EmbedctlError(f"measure {name!r}: the depth {value!r} must be a whole number from 1 to "
                                f"{MAX_DEPTH:,}",
                                hint="e.g. P_5, ndcg_cut_10 or recall_5,10,100")


def _known_prefix(key: str, supported: set[str]) -> str | None:
    """`ndcg_cut_20` -> `ndcg_cut` when the tail is a number list (trec_eval's parameter syntax)."""
    for measure in sorted(supported, key=len, reverse=True):
        if key.startswith(measure + "_") and re.fullmatch(r"[\d.,]+", key[len(measure) + 1:]):
            return measure
    return None


def ranked(docs: Mapping[str, float]) -> list[tuple[str, float]]:
    """Documents of one query in trec_eval order: score descending, ties by docid descending."""
    return sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)


def cut_run(run: Run, depth: int) -> dict[str, dict[str, float]]:
    """Keep the top ``depth`` documents per query (trec_eval order)."""
    return {qid: dict(ranked(docs)[:depth]) for qid, docs in run.items()}


def _clean_qrels(qrels: Qrels) -> dict[str, dict[str, int]]:
    return {str(q): {str(d): max(int(r), 0) for d, r in docs.items()} for q, docs in qrels.items() if docs}


def _clean_run(run: Run) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        clean = {str(d): float(s) for d, s in docs.items()}
        bad = [d for d, s in clean.items() if not math.isfinite(s)]
        if bad:
            raise EmbedctlError(f"run query {qid!r}: score of document {bad[0]!r} is not a finite number")
        out[str(qid)] = clean
    return out


def per_query(run: Run, qrels: Qrels, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, dict[str, float]]:
    """Per-query values ``{qid: {measure: value}}`` for every qrels query (0 where the run has none).

    Inputs: run ``{qid: {docid: score}}``, qrels ``{qid: {docid: rel}}`` with string ids.
    """
    import pytrec_eval

    parsed = [parse_measure(m) for m in measures]
    judged = _clean_qrels(qrels)
    run = _clean_run(run)
    values: dict[str, dict[str, float]] = {qid: {} for qid in judged}
    results: dict[int | None, dict[str, dict[str, float]]] = {}
    for cut in {m.cut for m in parsed}:
        scored = cut_run(run, cut) if cut is not None else run
        scored = {q: d for q, d in scored.items() if q in judged}
        wanted = {m.trec for m in parsed if m.cut == cut}
        results[cut] = pytrec_eval.RelevanceEvaluator(judged, wanted).evaluate(scored)
    for m in parsed:  # in the order asked for
        keys = [m.key] if m.key is not None else list(_trec_keys(m.trec))
        for qid in judged:
            got = results[m.cut].get(qid, {})
            for key in keys:
                values[qid][m.name if m.key is not None else key] = float(got.get(key, 0.0))
    return values


def evaluate_run(run: Run, qrels: Qrels, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, float]:
    """Mean of each measure over the qrels' queries (pytrec_eval); keys as in ``measures``.

    Example: ``evaluate_run(run, qrels)`` -> ``{"nDCG@10": 0.64, "MRR@10": 0.60, "Recall@10": 0.78, "Recall@100": 0.92}``;
    ``evaluate_run(run, qrels, [*DEFAULT_MEASURES, "map", "P_5"])`` adds ``map`` and ``P_5``.
    """
    if not qrels or not any(qrels.values()):
        raise EmbedctlError("the qrels hold no judgments, so there is nothing to evaluate against",
                            hint="check the qrels file and the split you selected")
    values = per_query(run, qrels, measures)
    names: list[str] = []
    for row in values.values():
        names = list(row)
        break
    count = len(values)
    return {name: sum(row[name] for row in values.values()) / count for name in names}


def measures_with_defaults(extra: Sequence[str] | None) -> list[str]:
    """The four defaults followed by any extra measure not already among them (order kept)."""
    out = list(DEFAULT_MEASURES)
    for m in extra or []:
        if m not in out:
            out.append(m)
    return out
