"""CPU threads of one command (train.threads, index.threads, prebatch.threads; search.threads is set by
the search session): torch's intra-op pool, and faiss's OpenMP pool when faiss is already imported.

Why a setting: torch defaults to one thread per core; on a machine shared with other jobs that
oversubscribes the cores and a training step slowed 10-20x. null leaves the library defaults.
"""

from __future__ import annotations

import sys
import threading


def set_threads(threads: int | None) -> int | None:
    """Apply ``threads`` (None: leave the defaults); returns the number of torch threads now in use."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
        set_faiss_threads_of_this_thread(int(threads))
    return torch.get_num_threads()


def set_torch_threads_of_this_thread(threads: int) -> None:
    """torch's intra-op threads for the calling thread only (a server's writer beside its searches).

    torch keeps one count per OpenMP thread (omp_set_num_threads), read by each thread from a process-wide
    value at its first parallel operation, and ``torch.set_num_threads`` sets both: so this thread takes
    ``threads`` (set, then one parallel operation so its lazy first read happens now), and a helper thread
    puts the process-wide value back for threads that have not yet started, leaving every other thread's
    own count as it was."""
    import torch

    with _PROCESS_WIDE:  # two threads doing this at once would each read the other's count as the one to restore
        before = torch.get_num_threads()
        torch.set_num_threads(int(threads))
        torch.ones(4096).add_(1)  # this thread's first parallel operation reads the count now, not later
        restore = threading.Thread(target=torch.set_num_threads, args=(before,), name="embedctl-threads-restore")
        restore.start()
        restore.join()


_PROCESS_WIDE = threading.Lock()


def set_faiss_threads_of_this_thread(threads: int) -> bool:
    """faiss's OpenMP threads for the calling thread (faiss carries its own OpenMP runtime, whose count is
    per thread too: a count set in the thread that opened an index does not reach a thread that searches it).
    False when faiss is not imported yet (nothing to set)."""
    faiss = sys.modules.get("faiss")
    if faiss is None or not hasattr(faiss, "omp_set_num_threads"):
        return False
    faiss.omp_set_num_threads(int(threads))
    return True
