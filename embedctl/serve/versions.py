"""The version the service reads: one :class:`embedctl.Index` per committed version, swapped atomically.

Why one object per version: ``Index.add`` / ``Index.refresh`` move an Index to another version in place,
so a search that read its session and then its documents could mix two versions. Here a reader takes the
current :class:`Snapshot` once (one attribute read) and uses it to the end; a newer version is opened
beside it (the encoder shared, the arrays and documents opened now) and only then put in its place. The
files of an old version that a later commit unlinks (embedctl.index.generations.collect_garbage keeps the
newest two) stay readable through the maps and handles the snapshot holds (POSIX); they are freed when the
last request on it ends.

Versions committed by another process (``embedctl index add``) are found by a watcher thread that lists
the index's commit files every ``serve.refresh_s`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.api import Index
from embedctl.errors import EmbedctlError
from embedctl.index.generations import commit_numbers
from embedctl.models.encode_backends import LONG_LIVED
from embedctl.util.failpoints import hold

log = logging.getLogger("embedctl.serve")
OPEN_TRIES = 5  # another process may commit twice (and unlink our version's files) while we open it


@dataclass(frozen=True)
class Snapshot:
    """One committed version, opened for searching (never changed; dropped when no request holds it)."""

    index: Index
    version: int
    documents: int
    opened_at: float = field(default_factory=time.time)


def newest_version(path: Path) -> int:
    numbers = commit_numbers(path)
    return numbers[-1] if numbers else 0


class Versions:
    """The current :class:`Snapshot` and the swaps to newer ones (see the module docstring)."""

    def __init__(self, path: Path, loaded: Any, refresh_s: float, on_swap: Any = None):
        self.path, self.loaded, self.refresh_s = path, loaded, refresh_s
        self.current: Snapshot | None = None
        self.error: str | None = None  # why the first open failed (readyz says it)
        self._swap = threading.Lock()
        self._stop = threading.Event()
        self._on_swap = on_swap
        self._watcher: threading.Thread | None = None

    # -- opening ------------------------------------------------------------------------------------
    def open_first(self) -> None:
        """Open the newest version (loads the model and the arrays); then watch for newer ones."""
        try:
            hold("serve:open")  # tests: /readyz while the index is opening (embedctl.util.failpoints)
            self._install(self._open())
        except Exception as err:  # readyz reports it; the log has the traceback
            self.error = str(err)
            log.exception("could not open the index %s", self.path)
            return
        self._watcher = threading.Thread(target=self._watch, name="embedctl-serve-watcher", daemon=True)
        self._watcher.start()

    def _open(self) -> Snapshot:
        share = self.current.index.session if self.current is not None else None
        for attempt in range(OPEN_TRIES):
            try:
                index = Index(self.path, self.loaded)
                session = index.session
                session.queries = LONG_LIVED  # `model.encoder_backend=auto` for the search: the fast path
                if share is not None:
                    session.adopt_encoder(share)
                session.retriever  # noqa: B018 - map the arrays now, not on the first search
                return Snapshot(index, session.generation.number, session.generation.num_docs)
            except (EmbedctlError, OSError):
                if attempt == OPEN_TRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _install(self, snap: Snapshot) -> None:
        self.current = snap  # one reference assignment: a reader sees the old or the new snapshot, whole
        self.error = None
        if self._on_swap is not None:
            self._on_swap(snap)

    def advance(self, at_least: int | None = None) -> Snapshot | None:
        """Open the newest committed version if it is newer than the current one (``at_least``: a version
        just committed by this server, which readers must see before its writer is answered)."""
        with self._swap:
            current = self.current
            if current is None:
                return None
            newest = newest_version(self.path)
            if newest <= current.version and (at_least is None or current.version >= at_least):
                return current
            snap = self._open()
            if snap.version > current.version:
                self._install(snap)
            return self.current

    def _watch(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.advance()
            except Exception:  # a damaged commit by another writer: keep serving the version we have
                log.exception("could not open a newer version of %s; still serving version %s", self.path,
                              self.current.version if self.current else None)

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
