"""metrics.jsonl (one JSON object per logged step, rank 0 only) and the text the progress bar shows per step."""

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
        # Appended in place, not util.atomic.write_json: a log grows a line per step (rewriting it whole
        # would cost O(steps^2)); a torn last line from a crash is dropped on resume (_truncate_after).
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(atomic.json_text(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def progress_info(record: dict[str, Any]) -> str:
    """What the training bar shows after the rate: loss, lr, examples/s (and nDCG@10 when evaluated)."""
    rate = record["examples_per_s"]  # a slow step's rate keeps two significant digits, never "0.0 ex/s"
    shown = f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"
    info = f"loss {record['loss']:.4f}  lr {record['lr']:.2e}  {shown} ex/s"
    if "eval/nDCG@10" in record:
        info += f"  nDCG@10 {record['eval/nDCG@10']:.4f}"
    return info
