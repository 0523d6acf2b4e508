"""What every subcommand shares: splitting CONFIG from key=value, loading, and error display.

Each ``embedctl/cli/<name>.py`` parses its flags, calls :func:`load` and hands the result to
``embedctl.commands.<name>``. It imports that module inside the command function, not at the top: the
commands pull in torch, and ``embedctl --help`` must start in well under a second without it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.markup import escape

from embedctl.cli.oserrors import environment_error, is_broken_pipe, quiet_pipe_exit
from embedctl.config import load_config
from embedctl.errors import EmbedctlError
from embedctl.util.console import printable, stderr_console

F = TypeVar("F", bound=Callable[..., Any])
_OVERRIDE = re.compile(r"^[A-Za-z_][\w.\-]*=")
CONFIG_HELP = "Optional config file (YAML) followed by key=value overrides, e.g. optim.lr=1e-4."


def split_args(args: list[str] | None, *, allow_positional: bool = False) -> tuple[str | None, list[str], list[str]]:
    """Split positional arguments into (config path, overrides, other positionals)."""
    config: str | None = None
    overrides: list[str] = []
    others: list[str] = []
    for arg in args or []:
        if _OVERRIDE.match(arg):
            overrides.append(arg)
        elif config is None and arg.endswith((".yaml", ".yml")):
            config = arg
        elif allow_positional:
            others.append(arg)
        else:
            raise EmbedctlError(
                f"unexpected argument {arg!r}: expected a config file (.yaml) or key=value overrides",
                hint="write overrides as dotted.key=value, e.g. train.max_steps=10",
                exit_code=2,
            )
    return config, overrides, others


def load(args: list[str] | None, flags: dict[str, Any] | None = None, *, allow_positional: bool = False):
    """Load the config named in ``args`` with its overrides and the command's flags (flags win)."""
    config, overrides, others = split_args(args, allow_positional=allow_positional)
    loaded = load_config(config, overrides, flags)
    _LOADED[:] = [loaded]  # what an environment error names when the OSError carries no path
    return (loaded, others) if allow_positional else loaded


_LOADED: list[Any] = []
# the output each command writes: named in a full-disk / read-only message whose OSError has no file name
_OUTPUT_KEYS = {"pretokenize": ("pretokenize.output",), "prebatch": ("prebatch.output",), "train": ("output.dir",),
                "index": ("index.root", "index.name"), "add": ("index.root", "index.name"),
                "delete": ("index.root", "index.name"), "compact": ("index.root", "index.name"),
                "search": ("search.output",)}


def _output_of(command: str) -> str | None:
    keys = _OUTPUT_KEYS.get(command)
    if not keys or not _LOADED:
        return None
    cfg = _LOADED[0].cfg
    parts = [getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]) for k in keys]
    return "/".join(str(p) for p in parts if p) or None


def report(err: BaseException) -> None:
    console = stderr_console()
    # a message quoting an input (an id, a line of a file) shows its control characters escaped, line by line
    text = "\n".join(printable(line) for line in str(err).split("\n"))
    if isinstance(err, EmbedctlError):
        console.print(f"[bold red]error:[/] {escape(text)}")
    else:
        console.print(f"[bold red]error:[/] {escape(type(err).__name__)}: {escape(text)}")
        console.print("(an unexpected error: set EMBEDCTL_DEBUG=1 to see the traceback)", markup=False)


def handle_errors(fn: F) -> F:
    """Turn user errors into a message and an exit code; tracebacks only with EMBEDCTL_DEBUG=1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            stderr_console().print("interrupted", markup=False)
            raise typer.Exit(130) from None
        except Exception as err:
            if is_broken_pipe(err):  # `embedctl ... | head -1`: the reader has gone; no message, like any tool
                quiet_pipe_exit()
            if os.environ.get("EMBEDCTL_DEBUG") == "1":
                raise
            if not isinstance(err, EmbedctlError):  # a full disk, a read-only folder: the path and the fix
                err = environment_error(err, output=_output_of(fn.__name__)) or err
            report(err)
            code = getattr(err, "exit_code", 1)
            raise typer.Exit(code) from None

    return wrapper  # type: ignore[return-value]

