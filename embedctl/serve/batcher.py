"""Micro-batching: concurrent searches grouped into one call of ``Index.search`` (one encoder batch).

One thread takes the first waiting search, then whatever else arrives within ``serve.batch_window_ms``
(and is already queued) up to ``serve.batch_max_queries`` queries, and ranks each group of requests
that read the same version with the same ``k``, ``text``, filter and mode in one ``Index.search(queries, k)`` call:
the results are those of searching each request alone (tests/serve/test_batching.py checks it), only
the encoder runs once for the group. A group that fails (a query the model cannot read, a bad filter) is
re-run request by request, so one bad request fails only itself.

Under steady load (many clients, each sending its next search once answered), the requests answered
together come back spread over a few milliseconds: a fixed short window would cut them into a small batch
and a larger one. So when fewer requests have gathered than the previous batch held, the first one waits
longer, up to ``serve.batch_window_max_ms``, for that many; one client alone (previous batch: 1) never
waits past ``serve.batch_window_ms``. Off by default (0): on the loaded 2-core host it did not show a gain
(bench/results/x86_64-avx2-2c/serve_loaded.json); ``bench_serve.py --window-ab-ms`` measures it beside the
default.

``serve.search_workers`` threads (one per core by default) each take their own micro-batch from the one
queue and rank it with ``threads`` CPU threads (cores / workers: one each on the 2-core host): independent
batches in parallel, rather than one batch split across the cores. A batch split across the cores stalls
whenever any one of its threads is preempted (each operation waits for its slowest thread): with a writer
encoding beside them, dense searches fell from 323 to 110 QPS that way, with part of the CPU idle (16
clients, bench/bench_serve.py reads during writes); side by side, 377 -> 245 QPS, and more QPS from 1 to
64 clients without writes (PLAID 1 client 50 -> 63, dense 16 clients 271 -> 344). PLAID's reads during
writes stayed ~200 -> ~100 QPS: there the writer's own share of the CPU is what they lose (merges after add,
embedctl.index.merge, later kept that share flat: docs/serving.md). The encoder's forward, its tokenizer
(``encode`` and ``encode_batch`` of a Rust tokenizer whose settings never change after it is built) and the
retrievers are read-only while searching, so two batches may run at once on the same snapshot.

At most ``serve.search_queue`` requests wait; beyond it ``submit`` raises :class:`QueueFull` (the endpoint
answers 503 with ``Retry-After``), so a flood of clients meets a bounded queue and a clear answer, not a
growing backlog whose answers come after the clients gave up.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from embedctl.serve.versions import Snapshot
from embedctl.util.failpoints import hold
from embedctl.util.threads import set_faiss_threads_of_this_thread, set_torch_threads_of_this_thread


class QueueFull(Exception):
    """The queue holds its most requests (``serve.search_queue`` / ``serve.write_queue``): answer 503."""


@dataclass
class SearchJob:
    snapshot: Snapshot
    texts: list[str]
    k: int
    text: bool
    filter: Any = None  # an expression, its JSON form (a dict) or None
    mode: str | None = None
    future: Future = field(default_factory=Future)

    def group(self) -> tuple:
        """Requests with the same group are ranked in one call."""
        return (id(self.snapshot), self.k, self.text, json.dumps(self.filter, sort_keys=True), self.mode)

    def search(self, texts: list[str]) -> Any:
        return self.snapshot.index.search(texts, self.k, text=self.text, filter=self.filter, mode=self.mode)


class SearchBatcher:
    """``submit(snapshot, texts, k, text) -> Future`` of one list of hits per text (see module docstring)."""

    def __init__(self, window_ms: float, max_queries: int, observe_batch: Any = None, max_queue: int = 0,
                 window_max_ms: float = 0.0, workers: int = 1, threads: int = 0):
        self.window_s, self.max_queries = window_ms / 1000.0, max_queries
        self.window_max_s = max(window_ms, window_max_ms) / 1000.0
        self.threads = threads  # torch threads of each worker (0: the process's)
        self._queue: queue.Queue[SearchJob | None] = queue.Queue(maxsize=max_queue)  # 0: unbounded
        self._observe = observe_batch  # called with the queries of each encoder batch (metrics)
        self.workers = [threading.Thread(target=self._loop, name=f"embedctl-serve-search-{i}", daemon=True)
                        for i in range(max(1, workers))]
        for thread in self.workers:
            thread.start()

    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, snapshot: Snapshot, texts: list[str], k: int, text: bool, filter: Any = None,
               mode: str | None = None) -> Future:
        job = SearchJob(snapshot, texts, k, text, filter, mode)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull("search queue full") from None
        return job.future

    def stop(self) -> None:
        for _ in self.workers:  # one None ends one worker
            try:
                self._queue.put(None, timeout=10)  # a full queue drains while we wait
            except queue.Full:
                return
        for thread in self.workers:
            thread.join(timeout=10)

    def _loop(self) -> None:
        if self.threads:
            set_torch_threads_of_this_thread(self.threads)
        faiss_set = not self.threads  # faiss is imported when the first dense index opens, after we start
        last_requests = 1  # requests in this worker's previous batch: how many the next one waits for
        while True:
            first = self._queue.get()
            if first is None:
                return
            if not faiss_set:
                faiss_set = set_faiss_threads_of_this_thread(self.threads)
            batch, stop = gather_window(self._queue, first, self.window_s, self.max_queries, lambda j: len(j.texts),
                                        expect=last_requests, window_max_s=self.window_max_s)
            last_requests = len(batch)
            hold("serve:batch")
            self._run([job for job in batch if not job.future.cancelled()])  # cancelled: the client went away
            if stop:  # the None that ended the window was one of stop()'s, one per worker
                return

    def _run(self, batch: list[SearchJob]) -> None:
        groups: dict[tuple, list[SearchJob]] = {}
        for job in batch:
            groups.setdefault(job.group(), []).append(job)
        for jobs in groups.values():
            texts = [t for job in jobs for t in job.texts]
            try:
                results = jobs[0].search(texts)
            except BaseException:
                if len(jobs) == 1:
                    _fail(jobs[0])
                    continue
                for job in jobs:  # find which request failed; the others still get their answers
                    try:
                        _answer(job, job.search(job.texts))
                    except BaseException:
                        _fail(job)
                continue
            if self._observe is not None:
                self._observe(len(texts))
            start = 0
            for job in jobs:
                _answer(job, results[start:start + len(job.texts)])
                start += len(job.texts)


def gather_window(jobs: queue.Queue, first: Any, window_s: float, limit: int, size_of: Callable[[Any], int],
                  expect: int = 1, window_max_s: float = 0.0) -> tuple[list[Any], bool]:
    """``first`` and what else arrives on ``jobs`` within ``window_s`` (or is already queued), until the
    sizes reach ``limit``: (the group, whether a None asked the loop to stop); while the group has fewer
    than ``expect`` jobs, the window stretches up to ``window_max_s``. The searches' batcher and the
    writer's commit groups both gather this way."""
    group, size = [first], size_of(first)
    started = time.monotonic()
    deadline, longest = started + window_s, started + max(window_s, window_max_s)
    while size < limit:
        try:
            remaining = (deadline if len(group) >= expect else longest) - time.monotonic()
            job = jobs.get(timeout=remaining) if remaining > 0 else jobs.get_nowait()
        except queue.Empty:
            break
        if job is None:
            return group, True
        group.append(job)
        size += size_of(job)
    return group, False


def _answer(job: SearchJob, result: Any) -> None:
    try:
        job.future.set_result(result)
    except InvalidStateError:  # the client went away and its request was cancelled
        pass


def _fail(job: SearchJob) -> None:
    try:
        job.future.set_exception(sys.exc_info()[1])
    except InvalidStateError:
        pass
