"""Iterate on a background thread: reading and parsing overlap the consumer's work (which releases the GIL)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator


def background(items: Iterable, maxsize: int = 8, name: str = "embedctl-background") -> Iterator:
    """Yield ``items`` produced on a daemon thread, at most ``maxsize`` ahead.

    Exceptions from ``items`` are raised in the consumer; a consumer that stops early (or closes the
    generator) stops the thread.

    >>> list(background(range(3)))
    [0, 1, 2]
    """
    q: queue.Queue = queue.Queue(maxsize=maxsize)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(("ok", item)):
                    return
            put(("ok", end))
        except BaseException as exc:  # raised again in the consumer
            put(("error", exc))

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "error":
                raise item
            if item is end:
                break
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
