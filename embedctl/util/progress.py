"""The one progress display of every long step (encoding, k-means, compression, training, mining).

On a terminal: a rich bar on stderr (done/total, rate, elapsed, ETA, an optional info text) that advances
per batch. Without a terminal (CI logs, ``nohup``, Slurm): one plain line every ``PLAIN_EVERY_S`` (30) seconds
and exactly one at the end, so a log shows the job is alive; each line has the rate and, with a total, the
time left. A rate under one item per second is shown as seconds per item ("12.3 s/step"), never
"0.0 steps/s". ``enabled=False`` shows nothing.

``EMBEDCTL_PROGRESS_EVERY_S`` sets that interval for the tests and bench scripts only (0: a line per step,
to check the lines; 1000: quiet logs): not a user setting, so it is no config key and is not documented
for users.

Example::

    with Progress(total=5183, label="encoding", unit="docs") as bar:
        for batch in batches:
            ...
            bar.advance(len(batch))
        bar.describe("k-means")
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

PLAIN_EVERY_S = float(os.environ.get("EMBEDCTL_PROGRESS_EVERY_S") or 30.0)  # the interval of plain lines


class Progress:
    """``with Progress(total, label, unit=...) as bar: bar.advance(n, info=...)``."""

    def __init__(self, total: int | None, label: str, *, unit: str = "docs", enabled: bool = True,
                 stream: Any = None, plain_every_s: float = PLAIN_EVERY_S):
        self.total, self.label, self.unit, self.enabled = total, label, unit, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.plain_every_s = plain_every_s
        self.done = 0
        self.info = ""
        self._rich: Any = None
        self._task: Any = None
        self._started = 0.0
        self._last_line = 0.0
        self._printed_done: int | None = None

    # -- context ------------------------------------------------------------------------------------
    def __enter__(self) -> Progress:
        self._started = self._last_line = time.perf_counter()
        if self.enabled and _is_tty(self.stream):
            self._rich = _rich_bar(self.stream, self.unit)
            self._rich.__enter__()
            self._task = self._rich.add_task(self.label, total=self.total, info="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)
        elif self.enabled and exc[0] is None and self._printed_done != self.done:
            self._plain_line()  # the final line, once: not again when the last advance just printed it

    # -- updates ------------------------------------------------------------------------------------
    def advance(self, n: int = 1, info: str | None = None) -> None:
        """Count ``n`` more items done; ``info`` replaces the text shown after the rate (e.g. the loss)."""
        self.done += n
        if info is not None:
            self.info = info
        if self._rich is not None:
            self._rich.update(self._task, advance=n, info=self.info)
        elif self.enabled and time.perf_counter() - self._last_line >= self.plain_every_s:
            self._plain_line()

    def describe(self, label: str) -> None:
        """Rename the step shown (e.g. "encoding" -> "k-means")."""
        self.label = label
        if self._rich is not None:
            self._rich.update(self._task, description=label)

    @property
    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self._started, 1e-9)

    def _plain_line(self) -> None:
        self._last_line = time.perf_counter()
        self._printed_done = self.done
        of = f"/{self.total}" if self.total is not None else ""
        elapsed = self._last_line - self._started
        info = f" {self.info}" if self.info else ""
        left = ""
        if self.total is not None and 0 < self.done < self.total:
            left = f", {format_duration((self.total - self.done) / max(self.rate, 1e-12))} left"
        print(f"{self.label}: {self.done}{of} {self.unit} ({format_rate(self.rate, self.unit)}, "
              f"{format_duration(elapsed)}{left}){info}", file=self.stream, flush=True)


def format_rate(per_s: float, unit: str) -> str:
    """``12.5 docs/s``, or below one item per second ``3.2 s/step`` (a slow step never reads "0.0 steps/s")."""
    if per_s <= 0:
        return f"- {unit}/s"
    if per_s >= 1.0:
        return f"{per_s:,.1f} {unit}/s"
    one = unit[:-1] if unit.endswith("s") else unit
    return f"{1.0 / per_s:,.1f} s/{one}"


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _rich_bar(stream: Any, unit: str):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(format_rate(speed or 0.0, unit))

    return RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                        TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                        console=Console(file=stream), transient=False)
