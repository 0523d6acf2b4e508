"""Watching a build from outside: the finished chunks its build ledger records (embedctl.index.ledger), and
finding one rank of a torchrun launcher to kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from embedctl.index.ledger import LEDGER_FILE


def recorded_chunks(build_folder: Path) -> list[int]:
    """Indexes of the chunks the ledger in ``build_folder`` records as finished ([] while it has none)."""
    try:
        ledger = json.loads((Path(build_folder) / LEDGER_FILE).read_text())
    except (FileNotFoundError, ValueError):  # not written yet (a rename replaces it whole: never half-read)
        return []
    return [c["index"] for c in ledger.get("plaid_chunks", [])]


def wait_for_chunks(build_folder: Path, count: int, proc, timeout_s: float = 240) -> bool:
    """Poll until the ledger records ``count`` chunks; False when ``proc`` ended or time ran out first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        if len(recorded_chunks(build_folder)) >= count:
            return True
        time.sleep(0.02)
    return len(recorded_chunks(build_folder)) >= count


def kill_after_cache_chunks(proc, ledger: Path, count: int, timeout_s: float = 90) -> int | None:
    """SIGKILL ``proc`` (a real pretokenize) once its shard ledger ``ledger`` lists ``count`` chunks; returns
    how many it listed then, or None when the run ended (or time ran out) before it could be killed."""
    import os
    import signal

    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        try:
            done = len(json.loads(Path(ledger).read_text())["chunks"])
        except (OSError, ValueError):
            done = 0
        if done >= count:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return done
        time.sleep(0.01)
    proc.wait(30)
    return None


def rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of the worker with RANK=rank among the children of the torchrun launcher ``launcher``."""
    for child in Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split():
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return int(child)
    return None


def kill_rank(launcher: subprocess.Popen, rank: int, timeout: float) -> float:
    """kill -9 the worker with RANK=rank of a running torchrun ``launcher``, wait for the launcher to exit,
    and return the seconds from the kill to its exit (the launcher is killed if it outlives ``timeout``)."""
    try:
        victim = rank_pid(launcher.pid, rank)
        assert victim is not None, f"no worker with RANK={rank} under the launcher"
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        launcher.communicate(timeout=timeout)  # drains any output pipes, so a chatty launcher cannot block
        return time.monotonic() - killed_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
