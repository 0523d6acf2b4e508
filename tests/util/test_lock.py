"""The writer lock: a second writer is refused naming the first; a holder killed with SIGKILL leaves a lock
that the next writer takes over; the lock is removed on exit."""

import os
import signal
import subprocess
import sys
import time

import pytest

from embedctl.errors import EmbedctlError
from embedctl.util.lock import WriterLock, read_holder

HOLD = "import sys, time; from embedctl.util.lock import WriterLock\n" \
       "with WriterLock(sys.argv[1], what='index'):\n    print('held', flush=True); time.sleep(60)\n"


def _holder(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_is_refused_then_takes_over_after_kill_9(tmp_path):
    folder = tmp_path / "idx"
    proc = _holder(folder)
    try:
        with pytest.raises(EmbedctlError, match=rf"another writer holds .*idx.lock \(pid {proc.pid} on "):
            with WriterLock(folder, what="index"):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert read_holder(folder.with_name("idx.lock"))["pid"] == proc.pid  # left behind by the killed holder
    with WriterLock(folder, what="index") as lock:  # stale: taken over
        assert read_holder(lock.path)["pid"] == os.getpid()
    assert not lock.path.exists()


def test_waiting_writer_gets_the_lock_when_the_holder_ends(tmp_path):
    folder = tmp_path / "cache"
    proc = _holder(folder)
    started = time.monotonic()
    subprocess.Popen(["sh", "-c", f"sleep 1; kill {proc.pid}"])
    with WriterLock(folder, what="token cache", wait_s=30):
        assert time.monotonic() - started >= 0.9
    proc.wait()
