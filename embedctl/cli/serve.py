"""`embedctl serve`: an HTTP search service over one index (runner: embedctl.commands.serve)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


@handle_errors
def serve(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    index: Optional[str] = typer.Option(None, "--index", "-i", help="serve.index: the index folder to serve."),
    host: Optional[str] = typer.Option(None, "--host", help="serve.host: address to listen on (default 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", "-p", help="serve.port: TCP port (0: a free one, printed)."),
    port_file: Optional[str] = typer.Option(None, "--port-file", help="serve.port_file: write the bound port here."),
) -> None:
    """Serve an index over HTTP: search, add, delete, info, health and Prometheus metrics (docs/serving.md)."""
    loaded = load(args, {"serve.index": index, "serve.host": host, "serve.port": port, "serve.port_file": port_file})
    from embedctl.commands import serve as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded)
