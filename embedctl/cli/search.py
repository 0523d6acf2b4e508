"""`embedctl search`: top-k retrieval from an index (runner: embedctl.commands.search)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("search")(search)


@handle_errors
def search(
    args: Optional[list[str]] = typer.Argument(None, help="A query, and/or a config file and key=value overrides. " + CONFIG_HELP),
    queries: Optional[str] = typer.Option(None, "--queries", "-q", help="search.queries: TSV or JSONL queries file."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="search.output: ranking file to write."),
    k: Optional[int] = typer.Option(None, "-k", "--k", help="search.k: hits per query."),
    index: Optional[str] = typer.Option(None, "--index", help="search.index: index folder."),
    qrels: Optional[str] = typer.Option(None, "--qrels", help="search.qrels: evaluate the ranking right away."),
    fmt: Optional[str] = typer.Option(None, "--format", help="search.format: colbert | trec."),
    filter_expr: Optional[str] = typer.Option(None, "--filter", help="search.filter: only documents whose fields pass, e.g. 'year >= 2015 and journal in (\"Nature\", \"Cell\")' (docs/filters.md)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="search.mode: neural | lexical | hybrid."),
    as_json: bool = typer.Option(False, "--json", help="Print single-query results as JSON."),
) -> None:
    """Search an index with one query (a table) or a queries file (a ranking file)."""
    loaded, positionals = load(args, {
        "search.queries": queries, "search.output": output, "search.k": k, "search.index": index,
        "search.qrels": qrels, "search.format": fmt, "search.filter": filter_expr, "search.mode": mode,
    }, allow_positional=True)
    from embedctl.commands import search as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded, positionals, as_json=as_json)
