"""Where embedctl prints: messages and progress notes on stderr, results (tables, JSON, YAML) on stdout.

Engines and commands print through these consoles (never the CLI's), so a run's results can be piped
while its messages stay on the terminal.
"""

from __future__ import annotations

from rich.console import Console


def stderr_console() -> Console:
    """Messages: no syntax highlighting, long lines wrap softly (paths stay copyable)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    """Results: tables and single-query hits."""
    return Console(highlight=False)


def print_where(label: str, path: str) -> None:
    """``label: path`` on stderr (where an output was written)."""
    stderr_console().print(f"{label}: {path}", markup=False)
