"""`embedctl pretokenize`: text -> token cache (the engine prints its per-side progress)."""

from __future__ import annotations

from typing import Any

from embedctl.data.pretokenize import run_pretokenize


def run(loaded: Any) -> list[dict]:
    """Tokenize this shard's part of both sides; returns the ledger of every side written."""
    return run_pretokenize(loaded)
