"""One writer at a time: a lock file that names its holder and that a crash cannot leave stuck.

Every command that writes an output folder (token cache, batch folder, index, training run) holds
``WriterLock(folder)`` for the whole write. The lock is a file ``<folder>.lock`` (beside the folder, so it
also guards a folder that does not exist yet and survives the folder's rename) created with O_EXCL and
holding JSON: pid, host, command line, start time. A second writer finds it and either waits
(``wait_s``) or fails at once with a message naming the holder. A lock whose process is gone (same host,
pid not alive, or the pid reused by a process started after the lock) is stale: it is taken over, so
kill -9 never leaves a folder locked for good. Locks on another host are never broken automatically: the
message says how to remove the file by hand.

Example::

    with WriterLock(Path("indexes/scifact"), what="index"):
        ...   # build, then rename into place
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError

POLL_S = 0.2


class WriterLock:
    """``with WriterLock(folder, what="token cache", wait_s=0):`` -- see the module docstring."""

    def __init__(self, folder: str | os.PathLike, what: str = "output", wait_s: float = 0.0):
        folder = Path(folder)
        self.path = folder.with_name(folder.name + ".lock") if folder.name else folder / ".lock"
        self.what, self.wait_s = what, wait_s
        self.held = False

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        deadline = time.monotonic() + self.wait_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            if self._try_create():
                self.held = True
                return
            holder = read_holder(self.path)
            if holder is not None and is_stale(holder):
                self._take_over(holder)
                continue
            if time.monotonic() >= deadline:
                raise EmbedctlError(
                    f"another writer holds {self.path} ({describe(holder)}): two writers of one {self.what} "
                    "would mix their outputs; nothing was written",
                    hint=f"wait for it to finish; if that process is gone (another machine), delete {self.path}")
            time.sleep(POLL_S)

    def release(self) -> None:
        if self.held:
            self.held = False
            holder = read_holder(self.path)
            if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
                self.path.unlink(missing_ok=True)

    def _try_create(self) -> bool:
        # Not util.atomic.write_json: O_EXCL creation in place is what makes this a lock (a rename would
        # replace another writer's lock). A reader that finds it half-written gets {} (read_holder).
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(holder_record(), fh)
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def _take_over(self, holder: dict[str, Any]) -> None:
        """Remove a stale lock, unless another process replaced it meanwhile (then the loop looks again)."""
        if read_holder(self.path) == holder:
            self.path.unlink(missing_ok=True)


def holder_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
            "process_start": _process_start(os.getpid()), "command": " ".join(sys.argv)[:500]}


def read_holder(path: Path) -> dict[str, Any] | None:
    """The lock's record; {} for a lock being written or unreadable (not stale: its writer may be mid-write)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        try:  # a half-written lock older than a minute belongs to a writer killed while creating it
            return {} if time.time() - path.stat().st_mtime < 60 else {"pid": -1, "host": socket.gethostname()}
        except FileNotFoundError:
            return None


def is_stale(holder: dict[str, Any]) -> bool:
    """The holder is a process on this host that is gone (or a later process reusing its pid)."""
    if not holder or holder.get("host") != socket.gethostname():
        return False
    pid = int(holder.get("pid", -1))
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    if _process_state(pid) == "Z":  # exited, not yet reaped by its parent
        return True
    started = holder.get("process_start")
    return started is not None and _process_start(pid) not in (None, started)


def describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "a writer that is starting"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("started", 0))))
    return f"pid {holder.get('pid')} on {holder.get('host')} since {since}: {holder.get('command', '?')}"


def _process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux /proc), to tell a reused pid apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
