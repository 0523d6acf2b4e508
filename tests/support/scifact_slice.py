"""A small, deterministic SciFact slice for index/search tests: N documents, Q test queries, their qrels.

The slice holds every relevant document of the chosen queries plus the first other documents of the
corpus, so retrieval quality on it is meaningful (and well above chance).
"""

from __future__ import annotations

import json
from pathlib import Path


def write_slice(scifact: Path, out: Path, num_docs: int = 200, num_queries: int = 20) -> dict[str, Path]:
    """Write corpus.jsonl, queries.jsonl and qrels.tsv (BEIR) into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [line.rstrip("\n").split("\t") for line in (scifact / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qids: list[str] = []
    for qid, _, _ in rows:
        if qid not in qids:
            qids.append(qid)
    qids = qids[:num_queries]
    qrels = [r for r in rows if r[0] in qids]
    wanted = {r[1] for r in qrels}
    docs: list[str] = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc_id = json.loads(line)["_id"]
            if doc_id in wanted or len(docs) < num_docs - len(wanted):
                docs.append(line if line.endswith("\n") else line + "\n")
                wanted.discard(doc_id)
            if len(docs) >= num_docs and not wanted:
                break
    paths = {"corpus": out / "corpus.jsonl", "queries": out / "queries.jsonl", "qrels": out / "qrels.tsv"}
    paths["corpus"].write_text("".join(docs), encoding="utf-8")
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        queries = [line for line in fh if json.loads(line)["_id"] in qids]
    paths["queries"].write_text("".join(queries), encoding="utf-8")
    paths["qrels"].write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in qrels))
    return paths
