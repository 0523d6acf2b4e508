"""What `embedctl search` and `embedctl index` do after their flags are parsed (the CLI stays logic-free)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError


def _err():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def index_command(loaded: Any) -> dict[str, Any]:
    """Build the index; prints where it lives (stderr) and a one-line summary."""
    from embedctl.index.build import build_index

    summary = build_index(loaded)
    _err().print(f"built {summary['kind']} index of {summary['num_docs']} documents in {summary['seconds']} s "
                 f"with model {summary['model']}", markup=False)
    _err().print(f"index: {Path(summary['index']).resolve()}", markup=False)
    return summary


def search_command(loaded: Any, positionals: list[str], as_json: bool = False) -> None:
    """One query (positional or search.query) -> table/JSON; search.queries -> ranking file (+ metrics)."""
    from embedctl.search.driver import SearchSession, check_k

    scfg = loaded.cfg.search
    query = " ".join(positionals) if positionals else scfg.query
    if query is not None and scfg.queries:
        raise EmbedctlError("give either a query or --queries FILE, not both")
    if query is None and not scfg.queries:
        raise EmbedctlError("nothing to search: give a query (embedctl search \"text\") or --queries FILE",
                            hint="e.g. embedctl search \"what causes scurvy\" or embedctl search -q queries.tsv -o run.tsv",
                            exit_code=2)
    check_k(scfg.k)
    if scfg.queries and not (scfg.output or scfg.qrels):
        raise EmbedctlError("--queries needs --output FILE for the ranking (or --qrels to only evaluate)", exit_code=2)
    if scfg.queries and scfg.output:
        _check_output(scfg.output, scfg.queries)
    session = SearchSession.open(loaded)
    if query is not None:
        _single(session, query, scfg, as_json)
    else:
        _batch(session, loaded, scfg, as_json)


def _check_output(output: str, queries: str) -> None:
    if Path(output).resolve() == Path(queries).resolve():
        raise EmbedctlError(f"--output {output} is the queries file; it would be overwritten",
                            hint="write the ranking to another file", exit_code=2)


def _single(session: Any, query: str, scfg: Any, as_json: bool) -> None:
    session.check_queries(["query"], [query])
    pids, scores = session.search_pids([query], scfg.k)[0]
    ids = session.docs.ids_of(pids)
    snippets = session.docs.snippets(pids, scfg.snippet_chars)
    if as_json:
        hits = [{"rank": r, "id": i, "score": round(float(s), 6), "text": t}
                for r, (i, s, t) in enumerate(zip(ids, scores, snippets, strict=True), start=1)]
        print(json.dumps({"query": query, "index": str(session.index_dir.resolve()), "kind": session.meta["kind"],
                          "k": scfg.k, "hits": hits}, ensure_ascii=False))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{query}", title_justify="left")
        table.add_column("rank", justify="right")
        table.add_column("id")
        table.add_column("score", justify="right")
        table.add_column("text")
        for rank, (i, s, t) in enumerate(zip(ids, scores, snippets, strict=True), start=1):
            table.add_row(str(rank), i, f"{float(s):.4f}", t)
        Console(highlight=False).print(table)
        if not ids:
            _err().print("no hits", markup=False)
    _err().print(f"index: {session.index_dir.resolve()}", markup=False)


def _batch(session: Any, loaded: Any, scfg: Any, as_json: bool) -> None:
    from embedctl.search.driver import run_batch

    qrels = None
    if scfg.qrels:
        from embedctl.eval.io import read_qrels
        from embedctl.eval.metrics import measures_with_defaults, parse_measure

        for measure in measures_with_defaults(scfg.metrics):  # a misspelt measure fails before any search
            parse_measure(measure)
        qrels = read_qrels(scfg.qrels)  # read first: a bad qrels file fails before any search
    # without --output only the judged queries matter (e.g. SciFact: 300 of 1,109 queries)
    only = set(qrels) if qrels is not None and not scfg.output else None
    rankings, seconds = run_batch(session, scfg.queries, scfg.k, only=only)
    n = len(rankings)
    t = session.timings
    _err().print(f"searched {n} queries in {seconds:.2f} s ({1000 * seconds / n:.1f} ms/query: encode "
                 f"{1000 * t['encode_s'] / n:.1f} ms, retrieve {1000 * t['retrieve_s'] / n:.1f} ms)", markup=False)
    if scfg.output:
        from embedctl.eval.io import write_run

        lines = write_run(scfg.output, rankings, fmt=scfg.format)
        _err().print(f"ranking: {scfg.output} ({lines} lines, {scfg.format} format)", markup=False)
    _err().print(f"index: {session.index_dir.resolve()}", markup=False)
    if qrels is not None:
        from embedctl.eval.evaluate import evaluate_loaded, print_metrics
        from embedctl.eval.metrics import measures_with_defaults

        run = {qid: dict(hits) for qid, hits in rankings}
        metrics = evaluate_loaded(run, qrels, measures_with_defaults(scfg.metrics),
                                  run_name=scfg.queries, qrels_name=scfg.qrels)
        print_metrics(metrics, as_json=as_json)
