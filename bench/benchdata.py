"""Where the benchmarks find BEIR SciFact (shared by every bench script)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def find_scifact(arg: str | Path | None = None) -> Path:
    """--scifact DIR, else $EMBEDCTL_SCIFACT, else ../shared/data/scifact beside the checkout."""
    for c in (arg, os.environ.get("EMBEDCTL_SCIFACT"), REPO.parent / "shared" / "data" / "scifact",
              "/work/shared/data/scifact"):
        if c and (Path(c) / "corpus.jsonl").is_file():
            return Path(c)
    sys.exit("SciFact not found: pass --scifact DIR or set EMBEDCTL_SCIFACT "
             "(a BEIR folder with corpus.jsonl, queries.jsonl, qrels/)")
