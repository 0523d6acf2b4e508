"""`embedctl config show|validate|keys`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load, stderr_console, stdout_console

app = typer.Typer(no_args_is_help=True)


@app.command("show")
@handle_errors
def show(args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP)) -> None:
    """Print the resolved config (all layers and overrides applied) as YAML."""
    loaded = load(args)
    typer.echo(loaded.to_yaml(), nl=False)


@app.command("validate")
@handle_errors
def validate(configs: Optional[list[str]] = typer.Argument(None, help="Config files (default: every file under configs/).")) -> None:
    """Validate configs; every problem of every file is reported, exit 2 if any."""
    from embedctl.config import load_config
    from embedctl.errors import ConfigError

    paths = configs or sorted(str(p) for p in Path("configs").glob("**/*.y*ml"))
    if not paths:
        raise ConfigError(["no config files given and none found under ./configs"])
    failed = 0
    console = stderr_console()
    for path in paths:
        try:
            load_config(path)
            console.print(f"ok      {path}", markup=False)
        except ConfigError as err:
            failed += 1
            console.print(f"FAILED  {err}", markup=False)
    if failed:
        raise typer.Exit(2)


@app.command("keys")
@handle_errors
def keys(
    prefix: Optional[str] = typer.Argument(None, help="Only keys starting with this, e.g. `optim` or `model.pool`."),
    markdown: bool = typer.Option(False, "--markdown", help="Write the reference as Markdown (docs/config-reference.md)."),
) -> None:
    """List every config key with its type, default and documentation."""
    from embedctl.config.reference import reference_markdown, reference_rows

    if markdown:
        typer.echo(reference_markdown(), nl=False)
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table("key", "type", "default", "meaning", show_lines=False)
    for row in reference_rows():
        if prefix is None or row.key.startswith(prefix):
            table.add_row(*(escape(text) for text in (row.key, row.type, row.default, row.doc)))
    stdout_console().print(table)
