"""`embedctl train`: run the training loop, then say where the final model is."""

from __future__ import annotations

from typing import Any

from embedctl.train.loop import run_training
from embedctl.util.console import print_where


def run(loaded: Any) -> dict[str, Any]:
    """Train as configured; rank 0 prints the final model's folder (stderr). Returns the loop's summary."""
    summary = run_training(loaded)
    if summary.get("is_main", True):
        print_where("final model", summary["output_dir"] + "/final")
    return summary
