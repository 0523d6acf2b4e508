"""`embedctl search`: one query -> a table (or JSON); a queries file -> a ranking file and/or metrics."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from embedctl.api import Hit, Index
from embedctl.errors import EmbedctlError
from embedctl.eval.coverage import measures_within, retrieval_depth
from embedctl.eval.evaluate import evaluate_loaded, print_metrics
from embedctl.eval.io import read_qrels, write_run
from embedctl.eval.metrics import measures_with_defaults, parse_measure
from embedctl.eval.sniff import file_kind
from embedctl.index.docs import snippet
from embedctl.search.driver import HYBRID, LEXICAL, check_k
from embedctl.search.filters import FilterError, as_filter
from embedctl.util.atomic import json_text
from embedctl.util.console import printable, stderr_console
from embedctl.util.fs import check_output_file
from embedctl.util.tables import print_table


def run(loaded: Any, positionals: list[str], as_json: bool = False) -> None:
    """One query (positional or search.query) -> table/JSON; search.queries -> ranking file (+ metrics)."""
    scfg = loaded.cfg.search
    query = " ".join(positionals) if positionals else scfg.query
    if query is not None and scfg.queries:
        scfg, query = _query_or_file(loaded, scfg, query, bool(positionals))
    if query is None and not scfg.queries:
        raise EmbedctlError("nothing to search: give a query (embedctl search \"text\") or --queries FILE",
                            hint="e.g. embedctl search \"what causes scurvy\" or embedctl search -q queries.tsv -o run.tsv",
                            exit_code=2)
    check_k(scfg.k)
    if scfg.queries and not (scfg.output or scfg.qrels):
        raise EmbedctlError("--queries needs --output FILE for the ranking (or --qrels to only evaluate)", exit_code=2)
    if scfg.queries and scfg.output:
        _check_output(scfg.output, scfg.queries)
    try:
        as_filter(scfg.filter)  # its syntax, before the index and the model are opened
        index = Index.open(config=loaded)
        if query is not None:
            # one query: search.query_k hits (10), not the config's batch depth, unless -k was given here
            k = scfg.k if loaded.origin("search.k") == "command line" else scfg.query_k
            _single(index, query, dataclasses.replace(scfg, k=k), as_json)
        else:
            _batch(index, scfg, as_json, k_given=loaded.origin("search.k") != "default")
    except FilterError as exc:  # the user wrote search.filter (or --filter): name it, not the parser's `filter`
        origin = loaded.origin("search.filter")
        raise exc.named("`search.filter` (" + ("--filter" if origin == "command line" else f"set in {origin}")
                        + ")") from exc


def _query_or_file(loaded: Any, scfg: Any, query: str, from_positionals: bool) -> tuple[Any, str | None]:
    """A query and a queries file both set: the one given on the command line wins over one from a config file
    (the shipped configs name their test queries for batch runs), with a note; both from the same level is a
    mistake, named. Returns the search settings and the query, each without what is not used."""
    query_origin = "command line" if from_positionals else loaded.origin("search.query")
    file_origin = loaded.origin("search.queries")
    if (query_origin == "command line") == (file_origin == "command line"):
        raise EmbedctlError(f"give either a query or --queries FILE, not both (the query: {query_origin}; "
                            f"search.queries={scfg.queries}: {file_origin})",
                            hint="drop one: the query to rank the file, or the file to search the one query",
                            exit_code=2)
    if query_origin == "command line":
        stderr_console().print(f"note: searching the one query given; search.queries={scfg.queries} "
                               f"({file_origin}) is not used", markup=False)
        return dataclasses.replace(scfg, queries=None), query
    stderr_console().print(f"note: ranking search.queries={scfg.queries}; search.query ({query_origin}) is not used",
                           markup=False)
    return scfg, None


def _check_output(output: str, queries: str) -> None:
    """Before any search: the ranking file can be written (not a folder, its folder not a file) and is not the queries file."""
    check_output_file(output, "--output")
    if Path(output).resolve() == Path(queries).resolve():
        raise EmbedctlError(f"--output {output} is the queries file; it would be overwritten",
                            hint="write the ranking to another file", exit_code=2)
    # an earlier ranking is replaced, as any output file is; anything else there (a corpus, qrels, notes
    # named by a slip of the keyboard) is a user's file that a search must not destroy
    target = Path(output)
    if target.is_file() and target.stat().st_size > 0 and file_kind(output) != "ranking":
        raise EmbedctlError(f"--output {output} exists and is not a ranking (its first rows are not "
                            f"`qid pid rank score` or TREC run rows); it is left as it is",
                            hint="write the ranking to another file, or move that file away first", exit_code=2)


def _single(index: Index, query: str, scfg: Any, as_json: bool) -> None:
    hits = index.search(query, scfg.k, filter=scfg.filter, mode=scfg.mode)
    session = index.session
    snippets = [snippet(h.title, h.text or "", scfg.snippet_chars) for h in hits]
    if as_json:
        rows = [{"rank": r, "id": h.id, "score": round(h.score, 6), "text": t, "fields": h.fields or {},
                 **({} if h.passage is None else {"passage": h.passage})}  # index.passages: the best passage's
                for r, (h, t) in enumerate(zip(hits, snippets, strict=True), start=1)]
        print(json_text({"query": query, "index": str(index.path.resolve()), "kind": index.kind,
                         "k": scfg.k, "mode": session.mode(scfg.mode), "filter": scfg.filter,
                         "backend": _backend(session, scfg.mode), "hits": rows,
                         "timings_ms": {"encode": round(1000 * session.timings["encode_s"], 3),
                                        "retrieve": round(1000 * session.timings["retrieve_s"], 3)}},
                        ensure_ascii=False))
    else:
        # printable(): a document's escape sequences stay inert (print_table prints cells as text, no markup)
        print_table(("rank", "id", "score", "text"),
                    [(str(r), printable(h.id), f"{h.score:.4f}", printable(t))
                     for r, (h, t) in enumerate(zip(hits, snippets, strict=True), start=1)],
                    keep=("rank", "id", "score"), right=("rank", "score"), title=printable(query))
        if not hits:
            stderr_console().print("no hits", markup=False)
    stderr_console().print(f"index: {index.path.resolve()}", markup=False)
    if not as_json:
        stderr_console().print(_backend_line(session, scfg.mode), markup=False)


def _batch(index: Index, scfg: Any, as_json: bool, k_given: bool = True) -> None:
    console = stderr_console()
    qrels = None
    k = scfg.k
    measures = measures_with_defaults(scfg.metrics)
    if scfg.qrels:
        for measure in measures:  # a misspelt measure fails before any search
            parse_measure(measure)
        qrels = read_qrels(scfg.qrels)  # read first: a bad qrels file fails before any search
        k, measures = _depth_for(measures, k, k_given)
    # without --output only the judged queries matter (e.g. SciFact: 300 of 1,109 queries)
    only = set(qrels) if qrels is not None and not scfg.output else None
    started = time.perf_counter()
    rankings = _pairs(index.rank_file(scfg.queries, k, only=only, filter=scfg.filter, mode=scfg.mode))
    seconds = time.perf_counter() - started
    session = index.session
    n = len(rankings)
    t = session.timings
    console.print(f"searched {n} queries in {seconds:.2f} s ({1000 * seconds / n:.1f} ms/query: encode "
                  f"{1000 * t['encode_s'] / n:.1f} ms, retrieve {1000 * t['retrieve_s'] / n:.1f} ms)", markup=False)
    if scfg.output:
        lines = write_run(scfg.output, rankings, fmt=scfg.format)
        console.print(f"ranking: {scfg.output} ({lines} lines, {scfg.format} format)", markup=False)
    console.print(f"index: {index.path.resolve()}", markup=False)
    console.print(_backend_line(session, scfg.mode), markup=False)
    if qrels is not None:
        run = {qid: dict(hits) for qid, hits in rankings}
        index_ids = set(session.docs.ids_of(range(len(session.docs))))
        metrics = evaluate_loaded(run, qrels, measures, run_name=f"the ranking of {scfg.queries}",
                                  qrels_name=scfg.qrels,
                                  documents=index_ids, documents_name=f"the index {index.path}")
        print_metrics(metrics, as_json=as_json)


def _backend(session: Any, mode: str) -> dict[str, Any]:
    """What searched: the neural retriever's report, the lexical side's, or both (hybrid)."""
    mode = session.mode(mode)
    if mode == LEXICAL:
        return session.lexical.backend_report()
    report = session.backend_report()
    return {**report, "lexical": session.lexical.backend_report()} if mode == HYBRID else report


def _backend_line(session: Any, mode: str) -> str:
    mode = session.mode(mode)
    if mode == LEXICAL:
        return "backend: bm25s (lexical)"
    return session.backend_line() + ("; lexical: bm25s" if mode == HYBRID else "")


def _pairs(rankings: list[tuple[str, list[Hit]]]) -> list[tuple[str, list[tuple[str, float]]]]:
    return [(qid, [(h.id, h.score) for h in hits]) for qid, hits in rankings]


def _depth_for(measures: list[str], k: int, k_given: bool) -> tuple[int, list[str]]:
    """With --qrels: without -k, retrieve as deep as the deepest reported measure (Recall@100: 100 hits);
    with -k (or search.k set), report only the measures that depth can answer, saying which are left out."""
    if not k_given:
        return max(k, retrieval_depth(measures) or k), measures
    kept, dropped = measures_within(measures, k)
    if dropped:
        stderr_console().print(f"note: {', '.join(dropped)} left out: they read deeper than the {k} hits per query "
                               f"retrieved (-k {k}); pass -k {retrieval_depth(dropped)} to report them", markup=False)
    return k, kept
