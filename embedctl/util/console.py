"""Where embedctl prints: messages and progress notes on stderr, results (tables, JSON, YAML) on stdout.

Engines and commands print through these consoles (never the CLI's), so a run's results can be piped
while its messages stay on the terminal.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader closed the pipe


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader of the output has gone (`embedctl ... | head -1`): exit quietly with the status of any
        Unix tool in that case (rich's own exits 1, like a failure)."""
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(PIPE_EXIT)


def stderr_console() -> Console:
    """Messages: no syntax highlighting, long lines wrap softly (paths stay copyable)."""
    return _Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    """Results: tables and single-query hits."""
    return _Console(highlight=False)


def printable(text: str) -> str:
    """``text`` safe to show on a terminal: every control character (ESC of an escape sequence, BEL, a
    carriage return that would overwrite the line, the C1 controls) written as its ``\\xNN`` escape, so
    document text can neither recolour, retitle nor rewrite the terminal. Print the result with
    ``markup=False`` (or as a rich ``Text``) so ``[bold]`` in a document stays text too."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def print_where(label: str, path: str) -> None:
    """``label: path`` on stderr (where an output was written)."""
    stderr_console().print(f"{label}: {path}", markup=False)
