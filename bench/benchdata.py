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


def queries_of(scifact: Path, split: str) -> tuple[list[str], list[str], dict]:
    """(qids sorted as numbers, their texts, qrels) of the queries judged in ``qrels/<split>.tsv``."""
    import json

    from embedctl.eval.io import read_qrels  # the caller has put the checkout on sys.path

    qrels = read_qrels(str(scifact / "qrels" / f"{split}.tsv"))
    texts = {}
    for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["_id"] in qrels:
            texts[row["_id"]] = row["text"]
    qids = sorted(texts, key=int)
    return qids, [texts[q] for q in qids], qrels
