"""`embedctl data inspect`: look inside a token cache or pre-batched folder."""

from __future__ import annotations

import typer

from embedctl.cli.common import handle_errors

app = typer.Typer(no_args_is_help=True)


@app.command("inspect")
@handle_errors
def inspect(
    path: str = typer.Argument(..., help="A token cache or pre-batched folder (local or URL)."),
    verify: bool = typer.Option(False, "--verify", help="Check every file's sha256 against the one recorded when it was written."),
) -> None:
    """Print schema, counts, token-length histogram, relevance counts and one decoded example."""
    from embedctl.commands import data_inspect as command  # here, not at the top: see embedctl.cli.common

    command.run(path, verify=verify)
