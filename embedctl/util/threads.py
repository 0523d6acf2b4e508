"""CPU threads of one command (train.threads, index.threads, prebatch.threads; search.threads is set by
the search session): torch's intra-op pool, and faiss's OpenMP pool when faiss is already imported.

Why a setting: torch defaults to one thread per core; on a machine shared with other jobs that
oversubscribes the cores and a training step slowed 10-20x. null leaves the library defaults.
"""

from __future__ import annotations

import sys


def set_threads(threads: int | None) -> int | None:
    """Apply ``threads`` (None: leave the defaults); returns the number of torch threads now in use."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
        faiss = sys.modules.get("faiss")
        if faiss is not None and hasattr(faiss, "omp_set_num_threads"):
            faiss.omp_set_num_threads(int(threads))
    return torch.get_num_threads()
