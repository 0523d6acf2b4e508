from __future__ import annotations

from dataclasses import dataclass

from embedctl.config.fields import at_least, positive


@dataclass
class RanksConfig:
    """`embedctl index` and `embedctl prebatch` on several processes (torchrun, srun, a PyTorchJob): how long a rank waits for the others (docs/scale.md)."""

    dead_s: float = positive(120.0)
    """A rank whose heartbeat stops for this many seconds is dead: the ranks waiting for it, or claiming their next chunk, exit 1 naming it (heartbeats every dead_s / 6 s, at most 5 s)."""
    wait_s: float = at_least(0, 0.0)
    """Bound on any single wait for another rank (rank 0's k-means, a barrier), in seconds; 0: none (liveness is still checked through dead_s)."""
