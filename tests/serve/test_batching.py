"""Micro-batching and versions in-process (embedctl.serve.batcher / versions) on tiny real indexes: a
batch of concurrent searches answers what one-at-a-time search answers; a held version keeps answering
after later commits unlink its files; a newer version is swapped in whole."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import embedctl
from embedctl.config import load_config
from embedctl.serve.batcher import SearchBatcher, gather_window
from embedctl.serve.versions import Versions

QUERIES = [f"{t}, part {i}" for i, t in enumerate(
    ["protein folding", "faiss and dense vectors", "BM25", "ocean tides and the moon", "jazz improvisation",
     "vitamin C and scurvy", "volcanoes and lava", "mitochondria in cells", "the moon", "lava flows"])]


def _all_at_once(n: int, submit) -> dict[int, object]:
    """``n`` client threads released together, each calling ``submit(i)``: {i: its future's result}."""
    barrier = threading.Barrier(n)
    results: dict[int, object] = {}

    def client(i: int) -> None:
        barrier.wait()
        results[i] = submit(i).result(timeout=120)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    return results


@pytest.mark.parametrize("kind,workers", [("plaid", 1), ("dense", 1), ("plaid", 2), ("dense", 2)])
def test_concurrent_searches_batched_equal_one_at_a_time(tiny, kind, workers):
    """One worker, or two ranking their own batches side by side on the same snapshot (serve.search_workers)."""
    path = tiny(kind)
    versions = Versions(path, load_config(None, ["search.threads=1"]), refresh_s=60)
    versions.open_first()
    snap = versions.current
    sizes: list[int] = []
    batcher = SearchBatcher(window_ms=200, max_queries=64, observe_batch=sizes.append, workers=workers, threads=1)
    ks = [3, 5]
    jobs = _all_at_once(len(QUERIES), lambda i: batcher.submit(snap, [QUERIES[i]], ks[i % 2], True))
    batcher.stop()
    versions.stop()
    assert max(sizes) > 1, sizes  # they were batched
    alone = embedctl.Index.open(path, overrides=["search.threads=1"])
    for i, query in enumerate(QUERIES):
        got, want = jobs[i][0], alone.search(query, k=ks[i % 2])
        assert [h.id for h in got] == [h.id for h in want], query
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-5, atol=1e-6)
        assert [h.text for h in got] == [h.text for h in want]


@pytest.mark.parametrize("kind", ["plaid", "dense"])
def test_two_workers_rank_every_mode_as_one_at_a_time(tiny, kind):
    """Neural, lexical and hybrid searches from many clients at once, on two workers side by side (the BM25
    side, fusion and the documents table shared between them): each answer is the one-at-a-time answer."""
    path = tiny(kind)
    versions = Versions(path, load_config(None, ["search.threads=1"]), refresh_s=60)
    versions.open_first()
    batcher = SearchBatcher(window_ms=5, max_queries=4, workers=2, threads=1)
    modes = [None, "lexical", "hybrid"]
    work = [(q, modes[i % 3]) for _ in range(3) for i, q in enumerate(QUERIES)]
    got = _all_at_once(len(work), lambda i: batcher.submit(versions.current, [work[i][0]], 4, True, mode=work[i][1]))
    batcher.stop()
    versions.stop()
    alone = embedctl.Index.open(path, overrides=["search.threads=1"])
    for i, (query, mode) in enumerate(work):
        want = alone.search(query, k=4, mode=mode)
        assert [(h.id, h.text) for h in got[i][0]] == [(h.id, h.text) for h in want], (query, mode)
        np.testing.assert_allclose([h.score for h in got[i][0]], [h.score for h in want], rtol=1e-5, atol=1e-6)


def test_a_bad_query_fails_only_its_own_request(tiny):
    versions = Versions(tiny("dense"), load_config(None, []), refresh_s=60)
    versions.open_first()
    batcher = SearchBatcher(window_ms=300, max_queries=64)
    good = batcher.submit(versions.current, ["ocean tides"], 2, False)
    bad = batcher.submit(versions.current, [""], 2, False)
    assert len(good.result(timeout=60)[0]) == 2
    with pytest.raises(embedctl.errors.InputError, match="no tokens"):
        bad.result(timeout=60)
    batcher.stop()
    versions.stop()


def test_a_held_version_survives_later_commits_and_advance_swaps_whole(tiny, tmp_path):
    import shutil

    path = shutil.copytree(tiny("dense"), tmp_path / "idx")
    versions = Versions(path, load_config(None, []), refresh_s=60)
    versions.open_first()
    old = versions.current
    before = old.index.search("ocean tides and the moon", k=5)
    writer = embedctl.Index.open(path)
    writer.add([{"id": "n1", "text": "Tides rise twice a day under the moon."}])
    writer.delete(["d5", "d13"])
    writer.compact()
    writer.add([{"id": "n2", "text": "Glaciers carve valleys over thousands of years."}])
    # four commits: version 0's files are unlinked (the newest two versions are kept)
    assert not (path / "docs.parquet").exists()
    again = old.index.search("ocean tides and the moon", k=5)  # still the version it opened, whole
    assert [(h.id, h.text) for h in again] == [(h.id, h.text) for h in before] and old.version == 0
    new = versions.advance()
    assert new.version == 4 and new.documents == 40 and versions.current is new
    assert new.index.search("tides rise twice a day", k=1)[0].id == "n1"
    versions.stop()


def test_the_window_stretches_for_as_many_requests_as_the_previous_batch():
    """gather_window on a real queue fed by a thread: with ``expect`` 4 the first job waits (up to
    ``window_max_s``) for the three that follow 200 ms apart; with ``expect`` 1 it takes only the 2 ms window."""
    import queue
    import time

    def gather(expect: int) -> list[int]:
        jobs: queue.Queue = queue.Queue()

        def feed() -> None:
            for i in (1, 2, 3):
                time.sleep(0.2)
                jobs.put(i)

        feeder = threading.Thread(target=feed)
        feeder.start()
        group, stop = gather_window(jobs, 0, 0.002, 64, lambda _: 1, expect=expect, window_max_s=10.0)
        feeder.join()
        assert not stop
        return group

    started = time.monotonic()
    assert gather(4) == [0, 1, 2, 3]
    assert time.monotonic() - started < 8.0  # it stopped waiting once the fourth came, not at window_max_s
    assert gather(1) == [0]
