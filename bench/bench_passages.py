"""Long documents: passages (``index.passages``) vs truncation on SciFact: ``python bench/bench_passages.py``.

On ``--docs`` documents of SciFact (default 800: every document judged for a test query, then the
corpus's first others; 0: the whole corpus, 5,183 documents) with a short document length (``--doc-max-length``, default 64 tokens: most SciFact abstracts are 200-300
tokens, so truncation keeps only their start) each kind (``--kinds``, default dense with the bundled minilm;
``plaid``: minilm as an untrained ColBERT) is built twice from the whole corpus, once truncating each
document to the model's length and once splitting it into passages of that length overlapping by
``--overlap`` tokens; both are searched with the 300 test queries through ``embedctl.Index.search``
(documents, each at its best passage): nDCG@10 and Recall@100 of each, their ratio, the build's wall
time and rows. Builds run one after the other on the same host: on a loaded host the wall times are
inflated, their ratio is the figure to read.

Writes bench/results/<machine kind>/passages.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchdata import find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402

KIND_OVERRIDES = {"dense": ["index.kind=dense"], "plaid": ["model.kind=colbert", "index.kind=plaid"]}


def corpus_slice(scifact: Path, qrels: dict, n: int, out: Path) -> Path:
    """The judged documents of ``qrels`` and the corpus's first others, ``n`` in all, in corpus order."""
    lines = (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    if not n:
        return scifact / "corpus.jsonl"
    judged = {d for docs in qrels.values() for d in docs}
    ids = [json.loads(line)["_id"] for line in lines]
    others = max(0, n - sum(i in judged for i in ids))
    keep = set(judged) | set([i for i in ids if i not in judged][:others])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line, i in zip(lines, ids, strict=True) if i in keep), encoding="utf-8")
    return out


def measure(idx, qids: list[str], texts: list[str], qrels: dict) -> dict:
    run = {}
    started = time.perf_counter()
    for start in range(0, len(texts), 64):
        for qid, hits in zip(qids[start:start + 64], idx.search(texts[start:start + 64], k=100, text=False),
                             strict=True):
            assert len({h.id for h in hits}) == len(hits), "a document twice in one ranking"
            run[qid] = {h.id: h.score for h in hits}
    search_s = time.perf_counter() - started
    metrics = evaluate_run(run, qrels, ["nDCG@10", "Recall@100"])
    return {"nDCG@10": round(metrics["nDCG@10"], 4), "Recall@100": round(metrics["Recall@100"], 4),
            "search_s": round(search_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scifact", default=None)
    ap.add_argument("--kinds", default="dense", help="comma-separated: dense, plaid")
    ap.add_argument("--docs", type=int, default=800, help="documents (judged first); 0: the whole corpus")
    ap.add_argument("--doc-max-length", type=int, default=64)
    ap.add_argument("--overlap", type=int, default=16)
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "passages")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    qids, texts, qrels = queries_of(scifact, "test")
    corpus = corpus_slice(scifact, qrels, args.docs, args.work / f"corpus-{args.docs}.jsonl")
    result: dict = {"settings": {"doc_max_length": args.doc_max_length, "passage_overlap": args.overlap,
                                 "passage_tokens": "null (the model's text budget)", "queries": len(qids),
                                 "documents": args.docs or "all",
                                 "model": "minilm (bundled)", "host": "shared 2-core host, loaded by other jobs: "
                                 "wall times inflated, read their ratios"}}
    for kind in args.kinds.split(","):
        section = {}
        for name, passages in (("truncated", False), ("passages", True)):
            overrides = [*KIND_OVERRIDES[kind], f"model.doc_max_length={args.doc_max_length}",
                         f"index.passages={str(passages).lower()}", f"index.passage_overlap={args.overlap}",
                         "index.batch_size=64"]
            started = time.perf_counter()
            idx = embedctl.Index.build(corpus, args.work / f"{kind}-{name}", overrides=overrides,
                                       overwrite=True)
            build_s = time.perf_counter() - started
            section[name] = {"build_s": round(build_s, 1), "rows": len(idx.session.docs),
                             "documents": idx.info()["documents"], **measure(idx, qids, texts, qrels)}
            print(kind, name, section[name], flush=True)
        t, p = section["truncated"], section["passages"]
        section["ratios"] = {"nDCG@10 passages / truncated": round(p["nDCG@10"] / t["nDCG@10"], 3),
                             "Recall@100 passages / truncated": round(p["Recall@100"] / t["Recall@100"], 3),
                             "build wall passages / truncated": round(p["build_s"] / t["build_s"], 2),
                             "rows passages / truncated": round(p["rows"] / t["rows"], 2),
                             "search wall passages / truncated": round(p["search_s"] / t["search_s"], 2)}
        print(kind, section["ratios"], flush=True)
        result[kind] = section
    write_result("passages", result, args.out)


if __name__ == "__main__":
    main()
