"""metrics.jsonl (one JSON object per logged step, rank 0 only) and the rich progress bar."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from embedctl.util import atomic


class MetricsLog:
    """Append-only JSON lines; on resume, lines after the resumed step (from the interrupted run) are dropped.

    Each line: {"step": 1-based, "loss", "lr", "examples_per_s", ...eval/* when evaluated}.
    """

    def __init__(self, path: Path, *, enabled: bool, after_step: int = 0):
        self.path, self.enabled = Path(path), enabled
        if enabled:
            self._truncate_after(after_step)

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:
                break  # a torn last line from a crash

        atomic.write_text(self.path, "".join(k + "\n" for k in kept))

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


class TrainProgress:
    """Rich progress bar: step / max, loss, lr, examples/s, ETA (rank 0; silent elsewhere)."""

    def __init__(self, total: int, completed: int, *, enabled: bool):
        self.total, self.completed, self.enabled = total, completed, enabled
        self.progress = None

    def __enter__(self) -> TrainProgress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False)
            self.progress.__enter__()
            self.task = self.progress.add_task("train", total=self.total, completed=self.completed, info="")
        return self

    def update(self, step: int, record: dict[str, Any]) -> None:
        if self.progress is None:
            return
        info = f"loss {record['loss']:.4f}  lr {record['lr']:.2e}  {record['examples_per_s']:.1f} ex/s"
        if "eval/nDCG@10" in record:
            info += f"  nDCG@10 {record['eval/nDCG@10']:.4f}"
        self.progress.update(self.task, completed=step, info=info)

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)
