"""`embedctl prebatch`: token cache + relevance labels -> pre-batched folder."""

from __future__ import annotations

from typing import Any

from embedctl.prebatch.build import run_prebatch


def run(loaded: Any) -> dict:
    """Write the pre-batched folder; returns the metadata written."""
    return run_prebatch(loaded)
