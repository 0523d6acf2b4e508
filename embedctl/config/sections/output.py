from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OutputConfig:
    """Where a command writes what it produces."""

    dir: str = "runs/embedctl"
    """Run folder: checkpoints, metrics.jsonl, resolved_config.yaml."""
    overwrite: bool = False
    """Allow writing into a non-empty output folder that holds another run."""
