"""`embedctl index`: build the index the config describes, then say where it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedctl.index.build import build_index
from embedctl.util.console import stderr_console


def run(loaded: Any) -> dict[str, Any]:
    """Build the index; prints a one-line summary and where the index lives (stderr)."""
    summary = build_index(loaded)
    console = stderr_console()
    console.print(f"built {summary['kind']} index of {summary['num_docs']} documents in {summary['seconds']} s "
                  f"with model {summary['model']}", markup=False)
    console.print(f"index: {Path(summary['index']).resolve()}", markup=False)
    return summary
