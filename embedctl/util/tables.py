"""Result tables on stdout: a box table that fits the terminal, or plain TSV when stdout is not a terminal.

Why: at 80 columns rich shrank every column and cut key names and run names with an ellipsis (a key cut
is a key a user cannot copy), and in a pipe a box table is noise for `cut`/`awk`. Here

- on a terminal (rich's view: a tty, or ``TTY_COMPATIBLE=1``): the ``keep`` columns (names, ids) are never
  cut nor wrapped; the others share what is left and wrap at words; a value still too long for its
  column is shortened in the middle (``head…tail``), so both its start and its end stay readable;
- otherwise: a header line and one tab-separated line per row, values whole (tabs and newlines in a value
  become spaces).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from embedctl.util.console import stdout_console

MIN_SHARE = 20  # characters a wrapped column needs to stay readable


def shorten_middle(text: str, width: int) -> str:
    """``text`` at most ``width`` characters: its head and tail joined by "…"."""
    if width <= 0 or len(text) <= width:
        return text
    if width == 1:
        return "…"
    head = (width - 1 + 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _clean(value: str) -> str:
    return " ".join(str(value).replace("\t", " ").split()) if ("\t" in str(value) or "\n" in str(value)) else str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, keep: Sequence[str] = (),
                right: Sequence[str] = (), title: str | None = None, shorten: Sequence[str] = ()) -> None:
    """Print ``rows`` under ``headers`` (see the module docstring). ``keep``: columns never cut (their width is
    their longest value); ``right``: right-aligned columns; ``shorten``: columns whose long values are
    shortened in the middle instead of wrapped (e.g. run names, paths)."""
    console = stdout_console()
    if not console.is_terminal:
        console.file.write("\t".join(headers) + "\n")
        for row in rows:
            console.file.write("\t".join(_clean(v) for v in row) + "\n")
        console.file.flush()
        return
    widths = {h: max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)}
    fixed = sum(widths[h] for h in headers if h in keep)
    borders = 3 * len(headers) + 1
    free = max(8, console.width - fixed - borders)
    flexible = [h for h in headers if h not in keep]
    if flexible and free // len(flexible) < MIN_SHARE:
        _print_stacked(console, headers, rows, keep, title)
        return
    table = Table(title=Text(title) if title else None, title_justify="left")  # a query is no markup
    for h in headers:
        if h in keep:
            table.add_column(h, no_wrap=True, min_width=widths[h], justify="right" if h in right else "left")
        else:
            table.add_column(h, overflow="fold", justify="right" if h in right else "left",
                             ratio=max(4, min(widths[h], 12 if h in shorten else 100)), min_width=min(widths[h], 10))
    share = max(4, free // max(1, len(flexible)))
    for row in rows:
        cells = []
        for h, value in zip(headers, row, strict=True):
            text = str(value)
            if h in shorten:
                text = shorten_middle(text, max(share, 12))
            cells.append(escape(text))
        table.add_row(*cells)
    console.print(table)


def _print_stacked(console, headers: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[str],
                   title: str | None) -> None:
    """A narrow terminal: per row, the kept values on one line, then ``header: value`` wrapped and indented."""
    width = max(40, console.width)
    out = [title] if title else []
    for row in rows:
        cells = dict(zip(headers, (str(v) for v in row), strict=True))
        out.append("  ".join(cells[h] for h in headers if h in keep))
        for h in headers:
            if h not in keep and cells[h].strip():
                out.append(textwrap.fill(f"{h}: {_clean(cells[h])}", width=width, initial_indent="    ",
                                         subsequent_indent="      ", break_long_words=False, break_on_hyphens=False))
    console.file.write("\n".join(out) + "\n")
    console.file.flush()
