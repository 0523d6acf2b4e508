"""A rich progress bar counting documents with a docs/s rate (stderr; silent when disabled)."""

from __future__ import annotations

from typing import Any


class DocProgress:
    """``with DocProgress(total, "encoding") as p: p.advance(n)``; shows done/total, docs/s, elapsed."""

    def __init__(self, total: int, description: str, enabled: bool = True):
        self.total, self.description, self.enabled = total, description, enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> DocProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.text import Text

            class Rate(ProgressColumn):
                def render(self, task) -> Text:
                    speed = task.finished_speed or task.speed
                    return Text(f"{speed:,.1f} docs/s" if speed else "- docs/s")

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def describe(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
