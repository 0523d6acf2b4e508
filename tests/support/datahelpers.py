"""Shared helpers for the data pipeline tests: locating SciFact and writing small slices of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def scifact_dir() -> Path:
    """<repo>/../shared/data/scifact, else $EMBEDCTL_SCIFACT, else /work/shared/data/scifact (skip if absent)."""
    candidates = [REPO.parent / "shared" / "data" / "scifact"]
    if os.environ.get("EMBEDCTL_SCIFACT"):
        candidates.append(Path(os.environ["EMBEDCTL_SCIFACT"]))
    candidates.append(Path("/work/shared/data/scifact"))
    for c in candidates:
        if (c / "corpus.jsonl").is_file():
            return c
    pytest.skip("SciFact not found: set EMBEDCTL_SCIFACT to a BEIR scifact folder")


def scifact_slice(dest: Path, n_queries: int = 12, extra_docs: int = 20, split: str = "train") -> Path:
    """Write a small BEIR folder: the first ``n_queries`` train queries with qrels, their positives and
    ``extra_docs`` more documents. Returns the folder."""
    src = scifact_dir()
    qrels_lines = (src / "qrels" / f"{split}.tsv").read_text().splitlines()
    header, rows = qrels_lines[0], [r.split("\t") for r in qrels_lines[1:] if r.strip()]
    qids: list[str] = []
    for q, _, _ in rows:
        if q not in qids:
            qids.append(q)
        if len(qids) == n_queries:
            break
    keep_rows = [r for r in rows if r[0] in qids]
    pos_docs = {r[1] for r in keep_rows}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "qrels").mkdir(exist_ok=True)
    corpus_out, extra = [], 0
    with open(src / "corpus.jsonl") as fh:
        for line in fh:
            doc = json.loads(line)
            if doc["_id"] in pos_docs:
                corpus_out.append(line)
            elif extra < extra_docs:
                corpus_out.append(line)
                extra += 1
            if extra >= extra_docs and len(corpus_out) >= len(pos_docs) + extra_docs:
                break
    (dest / "corpus.jsonl").write_text("".join(corpus_out))
    queries_out = [ln for ln in (src / "queries.jsonl").read_text().splitlines(keepends=True)
                   if json.loads(ln)["_id"] in qids]
    (dest / "queries.jsonl").write_text("".join(queries_out))
    (dest / "qrels" / f"{split}.tsv").write_text(header + "\n" + "".join("\t".join(r) + "\n" for r in keep_rows))
    return dest
