"""Per-thread CPU thread counts (embedctl.util.threads): a server's writer and search workers each set their
own without changing any other thread's."""

from __future__ import annotations

import threading

import pytest
import torch

from embedctl.util.threads import set_faiss_threads_of_this_thread, set_torch_threads_of_this_thread


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


@pytest.fixture
def two_threads():
    """A known process-wide count (earlier tests may have set 1), put back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def test_torch_threads_of_one_thread_leave_the_others_alone(two_threads):
    before = two_threads

    def writer():
        set_torch_threads_of_this_thread(1)
        torch.ones(1 << 16).add_(1)  # a parallel operation after the set keeps the count
        return torch.get_num_threads()

    assert _in_thread(writer) == 1
    assert torch.get_num_threads() == before  # this thread
    assert _in_thread(torch.get_num_threads) == before  # a thread started afterwards


def test_faiss_threads_are_per_thread_too():
    faiss = pytest.importorskip("faiss")
    default = _in_thread(faiss.omp_get_max_threads)
    if default < 2:
        pytest.skip("one CPU")
    assert _in_thread(lambda: set_faiss_threads_of_this_thread(1) and faiss.omp_get_max_threads()) == 1
    assert _in_thread(faiss.omp_get_max_threads) == default
