"""`embedctl config show|validate|keys` (runner: embedctl.commands.config)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load
from embedctl.commands import config as command

app = typer.Typer(no_args_is_help=True)


@app.command("show")
@handle_errors
def show(args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP)) -> None:
    """Print the resolved config (all layers and overrides applied) as YAML."""
    command.show(load(args))


@app.command("validate")
@handle_errors
def validate(configs: Optional[list[str]] = typer.Argument(None, help="Config files (default: every file under configs/) and key=value overrides applied to each (alone: to the defaults).")) -> None:
    """Validate configs; every problem of every file is reported, exit 2 if any."""
    code = command.validate(configs)
    if code:
        raise typer.Exit(code)


@app.command("keys")
@handle_errors
def keys(
    prefix: Optional[str] = typer.Argument(None, help="Only keys starting with this, e.g. `optim` or `model.pool`."),
    markdown: bool = typer.Option(False, "--markdown", help="Write the reference as Markdown (docs/config-reference.md)."),
) -> None:
    """List every config key with its type, default and documentation."""
    command.keys(prefix, markdown)
