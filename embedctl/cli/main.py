"""`embedctl`: the typer app. Subcommand modules import nothing heavy at module level."""

from __future__ import annotations

import re
import sys

import typer

from embedctl import __version__
from embedctl.cli import config as config_cmd
from embedctl.cli import data as data_cmd
from embedctl.cli import evaluate as evaluate_cmd
from embedctl.cli import index as index_cmd
from embedctl.cli import prebatch as prebatch_cmd
from embedctl.cli import pretokenize as pretokenize_cmd
from embedctl.cli import search as search_cmd
from embedctl.cli import serve as serve_cmd
from embedctl.cli import train as train_cmd
from embedctl.cli.oserrors import is_broken_pipe, quiet_pipe_exit

_LOCAL_RANK = re.compile(r"^--local[_-]rank(=\d+)?$")

app = typer.Typer(
    name="embedctl",
    help="From raw text to a trained, indexed and evaluated retrieval model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for module in (pretokenize_cmd, prebatch_cmd, train_cmd, index_cmd, search_cmd, evaluate_cmd, serve_cmd):
    module.register(app)
app.add_typer(config_cmd.app, name="config", help="Show, validate and document configs.")
app.add_typer(data_cmd.app, name="data", help="Inspect token caches and pre-batched data.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"embedctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """embedctl resolves layered YAML recipes into typed configs and runs one of its engines."""


def main() -> None:
    # The deepspeed launcher passes --local_rank=N before the subcommand; ranks read LOCAL_RANK instead.
    sys.argv = [a for a in sys.argv if not _LOCAL_RANK.match(a)]
    try:
        app()
    except SystemExit as exc:
        # click answers a closed pipe (EPIPE while printing, e.g. `embedctl --help | head -1`) with exit 1:
        # that is the pipe's 141, not a failure
        if exc.code == 1 and exc.__context__ is not None and is_broken_pipe(exc.__context__):
            quiet_pipe_exit()
        raise
    finally:  # results still buffered for a reader that has gone (`| head -1`): exit quietly
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            quiet_pipe_exit()
