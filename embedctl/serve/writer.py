"""The one writer of the service: write requests arriving together are grouped into one commit.

Requests are queued (at most ``serve.write_queue``; beyond it the caller answers 503). One thread takes
the first, waits ``serve.write_window_ms`` for others (up to ``serve.write_group_docs`` documents or ids),
and commits them in arrival order: each run of consecutive adds is one ``Index.add`` (a later request's
text wins for an id two requests name), each run of deletes one ``Index.delete``. Every request of a
commit is answered with its version only once ``Index.add``/``delete`` has returned (the commit file is
fsynced and renamed into place: embedctl.index.generations.commit) and the readers search that version,
so a document is searchable as soon as its write is acknowledged.

The writer lock (embedctl.util.lock) is held only inside ``Index.add``/``delete``: between commits
``embedctl index add`` from a shell can write; a commit that finds it held waits ``serve.lock_wait_s``.
The writer has its own copy of the encoder, so a long add never delays a search. It encodes with
``serve.writer_threads`` CPU threads (default 1): on the 2-core host, 20 SciFact documents cost 0.71
CPU-seconds with one thread against 0.87 with two, and the searches keep a core meanwhile.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from embedctl.api import Index
from embedctl.serve.batcher import QueueFull, gather_window
from embedctl.util.threads import set_torch_threads_of_this_thread

QUEUE_FULL = "queue full"
__all__ = ["QUEUE_FULL", "QueueFull", "WriteJob", "Writer"]

@dataclass
class WriteJob:
    kind: str                       # "add" | "delete"
    items: list[Any]                # add: {"id", "text"[, "title"]} dicts; delete: ids
    future: Future = field(default_factory=Future)


class Writer:
    """``submit(kind, items) -> Future`` of ``{"version", ...}`` (see the module docstring)."""

    def __init__(self, index: Index, window_ms: float, group_items: int, max_queue: int,
                 after_commit: Any, observe: Any = None, threads: int = 0):
        self.index = index          # its own Index object: the writer's version, its own encoder
        self.threads = threads      # torch threads of the writer's thread (0: the process's)
        self.window_s, self.group_items = window_ms / 1000.0, group_items
        self._queue: queue.Queue[WriteJob | None] = queue.Queue(maxsize=max_queue)
        self._after_commit = after_commit  # version -> None: readers move to it before anyone is answered
        self._observe = observe            # (kind, requests, items, seconds) per commit (metrics)
        self._thread = threading.Thread(target=self._loop, name="embedctl-serve-writer", daemon=True)
        self._thread.start()

    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, kind: str, items: list[Any]) -> Future:
        job = WriteJob(kind, items)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull(QUEUE_FULL) from None
        return job.future

    def stop(self) -> None:
        """Commit what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout=600)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group, stop = gather_window(self._queue, first, self.window_s, self.group_items, lambda j: len(j.items))
            for run in _runs(group):
                self._commit(run)
            if stop:
                return

    def _commit(self, run: list[WriteJob]) -> None:
        started = time.perf_counter()
        if self.threads:  # each commit: opening a version applies search.threads to the thread that opens it
            set_torch_threads_of_this_thread(self.threads)
        try:
            if run[0].kind == "add":
                merged: dict[str, dict[str, Any]] = {}
                for job in run:
                    for doc in job.items:
                        merged.pop(doc["id"], None)  # the later request wins, in its place
                        merged[doc["id"]] = doc
                summary = self.index.add(list(merged.values()))
                answers = [{"version": int(summary["generation"]), "documents": len(job.items)} for job in run]
            else:
                ids = list(dict.fromkeys(i for job in run for i in job.items))
                summary = self.index.delete(ids)
                unknown = set(summary["unknown"])
                answers = [{"version": int(summary["generation"]),
                            "deleted": sum(1 for i in dict.fromkeys(job.items) if i not in unknown),
                            "unknown": [i for i in dict.fromkeys(job.items) if i in unknown]} for job in run]
            self._after_commit(int(summary["generation"]))
        except BaseException as err:
            for job in run:
                _settle(job.future, error=err)
            return
        if self._observe is not None:
            self._observe(run[0].kind, len(run), sum(len(j.items) for j in run), time.perf_counter() - started)
        for job, answer in zip(run, answers, strict=True):
            _settle(job.future, answer)


def _settle(future: Future, answer: Any = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)
    except InvalidStateError:  # the client went away and its request was cancelled: the commit stands
        pass


def _runs(group: list[WriteJob]) -> list[list[WriteJob]]:
    """Consecutive jobs of one kind, in arrival order."""
    out: list[list[WriteJob]] = []
    for job in group:
        if out and out[-1][0].kind == job.kind:
            out[-1].append(job)
        else:
            out.append([job])
    return out
