"""Failpoints: named places in a writer where a test kills the process, to prove a crash there is safe.

The one fault-injection mechanism of embedctl. A production module marks a point with
``failpoint("add:encoded")``; nothing happens unless the environment variable ``EMBEDCTL_FAILPOINT`` names
that point, in which case the process sends itself SIGKILL there (a real kill -9: no cleanup, no
``finally``, no atexit). Tests start a real subprocess with the variable set and then check that the
previous version is whole and that a rerun ends with the same bytes (tests/index/test_lifecycle_kill.py).

The points, by writer (``<operation>:<stage>``):

- ``add:encoded``, ``add:segment-written``, ``add:committed``, and ``add:<file>`` after each array a new
  PLAID segment writes (embedctl.index.update, embedctl.index.plaid_segments);
- ``delete:tombstones-written``, ``delete:committed``;
- ``compact:segment-written``, ``compact:committed``, ``compact:<file>``.

:func:`fault` is the other kind: at a point named ``<name>`` it raises a RuntimeError (an error nothing in
embedctl expects) when the variable names it, so a test can see what a server answers for an internal
error (``serve:search``: embedctl.serve.app answers 500 with a request id, the log has the traceback).

The third kind, :func:`hold`, parks a thread at a point so that a test sees a state that otherwise lasts
milliseconds: ``serve:open`` (the server still opening the index: /readyz answers 503) and ``serve:batch``
(the searches' batcher busy: the search queue fills up to ``serve.search_queue``). The thread creates
``$EMBEDCTL_FAILPOINT_HOLD.held`` and waits until the file ``$EMBEDCTL_FAILPOINT_HOLD`` exists (at most
``HOLD_MAX_S``); later passes go straight through.

Reading the variable costs one dictionary lookup; no other behaviour depends on it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FAILPOINT_ENV = "EMBEDCTL_FAILPOINT"
HOLD_ENV = "EMBEDCTL_FAILPOINT_HOLD"
HOLD_MAX_S = 600.0


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL when ``$EMBEDCTL_FAILPOINT`` is ``name``; otherwise nothing."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def fault(name: str) -> None:
    """Raise RuntimeError when ``$EMBEDCTL_FAILPOINT`` is ``name``; otherwise nothing."""
    if os.environ.get(FAILPOINT_ENV) == name:
        raise RuntimeError(f"failpoint {name} ({FAILPOINT_ENV})")


def hold(name: str) -> None:
    """When ``$EMBEDCTL_FAILPOINT`` is ``name``: create ``$EMBEDCTL_FAILPOINT_HOLD.held``, then wait until the
    file ``$EMBEDCTL_FAILPOINT_HOLD`` exists (at most ``HOLD_MAX_S``); otherwise nothing."""
    if os.environ.get(FAILPOINT_ENV) != name or not os.environ.get(HOLD_ENV):
        return
    release = Path(os.environ[HOLD_ENV])
    release.with_name(release.name + ".held").touch()
    deadline = time.monotonic() + HOLD_MAX_S
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
