"""Filters, the lexical side and hybrid search on SciFact: ``python bench/bench_filters.py [--plaid-docs N]``.

- BM25 alone (the index's lexical side, bm25s; tokenizer settings in embedctl/index/lexical.py) on the
  test queries: nDCG@10 against the BEIR paper's 0.665; lexical build time beside the dense build's.
- Hybrid with zero-shot dense (minilm) against dense alone: each side's top 100 fused
  (embedctl.search.fusion); fusion and weight chosen on a held-out half of the train queries (the other half
  unused), then measured on test; the chosen setting also run through ``Index.rank_file(mode="hybrid")``.
- Filters on a field assigned at random (``bucket``: uniform 0..99, seed 0) at 1%, 10% and 50% selectivity,
  dense (flat) and PLAID (minilm as an untrained ColBERT, on the first ``--plaid-docs`` documents): share of
  test queries whose filtered top 10 equals the exhaustive filtered top 10 (dense: the exact ranking
  restricted; PLAID: exact MaxSim over the allowed documents), share returning min(10, passing) hits, and
  retrieval p50 filtered vs unfiltered (pre-encoded queries, interleaved query by query).

Writes bench/results/<machine kind>/filters.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.io import read_qrels  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402
from embedctl.search.fusion import fuse  # noqa: E402

BEIR_BM25_SCIFACT = 0.665
SELECTIVITY = {"1%": "bucket < 1", "10%": "bucket < 10", "50%": "bucket < 50"}


def corpus_with_bucket(scifact: Path, out: Path, n: int = 0) -> Path:
    rng = random.Random(0)
    lines = (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    rows = []
    for line in lines[:n] if n else lines:
        row = json.loads(line)
        row["bucket"] = rng.randrange(100)
        rows.append(json.dumps(row))
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def queries_of(scifact: Path, split: str) -> tuple[list[str], list[str], dict]:
    qrels = read_qrels(str(scifact / "qrels" / f"{split}.tsv"))
    texts = {}
    for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["_id"] in qrels:
            texts[row["_id"]] = row["text"]
    qids = sorted(texts, key=int)
    return qids, [texts[q] for q in qids], qrels


def ndcg(idx, qids, rankings, qrels) -> float:
    docs = idx.session.docs
    run = {q: dict(zip(docs.ids_of(p), map(float, s), strict=True)) for q, (p, s) in zip(qids, rankings, strict=True)}
    return round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)


def side_rankings(idx, texts: list[str], mode: str, depth: int = 100) -> list:
    out = []
    for start in range(0, len(texts), 64):
        out += idx.session.search_pids(texts[start:start + 64], depth, None, mode)
    return out


def hybrid_section(idx, scifact: Path) -> dict:
    tq, tt, tqrels = queries_of(scifact, "train")
    rng = random.Random(0)
    held = sorted(rng.sample(range(len(tq)), len(tq) // 2))
    tq, tt = [tq[i] for i in held], [tt[i] for i in held]
    neural_t, lexical_t = side_rankings(idx, tt, "neural"), side_rankings(idx, tt, "lexical")
    grid = []
    for fusion in ("rrf", "score"):
        for weight in (0.3, 0.4, 0.5, 0.6, 0.7):
            fused = [fuse(n, lx, fusion, weight, 60, 10) for n, lx in zip(neural_t, lexical_t, strict=True)]
            grid.append({"fusion": fusion, "hybrid_weight": weight, "train_ndcg@10": ndcg(idx, tq, fused, tqrels)})
    best = max(grid, key=lambda g: g["train_ndcg@10"])
    qids, texts, qrels = queries_of(scifact, "test")
    neural, lexical = side_rankings(idx, texts, "neural"), side_rankings(idx, texts, "lexical")
    test = {f"{g['fusion']}@{g['hybrid_weight']}": ndcg(idx, qids, [fuse(n, lx, g["fusion"], g["hybrid_weight"], 60, 10)
                                                                      for n, lx in zip(neural, lexical, strict=True)],
                                                         qrels) for g in grid}
    chosen = embedctl.Index.open(idx.path, overrides=[f"search.fusion={best['fusion']}",
                                                      f"search.hybrid_weight={best['hybrid_weight']}"],
                                 encoder=idx.encoder)
    qfile = idx.path.parent / "test_queries.tsv"
    qfile.write_text("".join(f"{q}\t{t}\n" for q, t in zip(qids, texts, strict=True)), encoding="utf-8")
    run = {q: {h.id: h.score for h in hits} for q, hits in chosen.rank_file(qfile, k=10, mode="hybrid")}
    return {"train_held_out_queries": len(tq), "grid": grid, "chosen": best,
            "neural_ndcg@10": ndcg(idx, qids, neural, qrels), "lexical_ndcg@10": ndcg(idx, qids, lexical, qrels),
            "hybrid_ndcg@10_by_setting": test, "hybrid_ndcg@10": test[f"{best['fusion']}@{best['hybrid_weight']}"],
            "hybrid_ndcg@10_via_rank_file": round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)}


def filter_section(idx, texts: list[str], exhaustive_top) -> dict:
    session = idx.session
    Q = session.encoder.encode_queries(texts, batch_size=64)
    retriever = session.retriever
    out = {}
    for name, expr in SELECTIVITY.items():
        allowed = session.allowed(expr)
        passing = int(allowed.sum())
        same = full = 0
        filtered_t, plain_t = [], []
        for i in range(len(texts)):
            q = Q[i:i + 1]
            t = time.perf_counter()
            retriever.search(q, 10)
            plain_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            pids, _ = retriever.search(q, 10, allowed=allowed)[0]
            filtered_t.append(time.perf_counter() - t)
            same += pids.tolist() == exhaustive_top(q, allowed)
            full += len(pids) == min(10, passing)
        p50_f, p50_u = statistics.median(filtered_t), statistics.median(plain_t)
        out[name] = {"filter": expr, "passing_docs": passing, "top10_equal_exhaustive": round(same / len(texts), 4),
                     "k_hits_when_k_pass": round(full / len(texts), 4), "filtered_p50_ms": round(1000 * p50_f, 3),
                     "unfiltered_p50_ms": round(1000 * p50_u, 3), "filtered_over_unfiltered": round(p50_f / p50_u, 3)}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--plaid-docs", type=int, default=2000, help="PLAID on the first N documents (0: all)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "filters")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/filters.json)")
    ap.add_argument("--reuse", action="store_true", help="search the indexes an earlier run left in --work")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict = {"host": "loaded (shared 2-core machine, other jobs running): timings are ratios within a run",
                    "tokenizer": "bm25s: lowercase, (?u)\\b\\w\\w+\\b, English stopwords, no stemmer "
                                 "(PyStemmer / snowballstemmer not installed); BM25 lucene k1=1.5 b=0.75"}
    corpus = corpus_with_bucket(scifact, args.work / "corpus.jsonl")
    builds = {}
    for name, overrides in (("dense", []), ("lexical", ["index.kind=lexical"])):
        t = time.perf_counter()
        if not args.reuse:
            built = embedctl.Index.build(corpus, args.work / name, overrides=overrides, overwrite=True)
            timings = built.summary["metadata"]["timings"]
            builds[name] = {"seconds": round(time.perf_counter() - t, 2), "lexical_s": timings.get("lexical_s")}
    result["builds"] = builds
    dense = embedctl.Index.open(args.work / "dense")
    qids, texts, qrels = queries_of(scifact, "test")
    run = {q: {h.id: h.score for h in hits} for q, hits in
           embedctl.Index.open(args.work / "lexical").rank_file(write_q(args.work, qids, texts), k=100)}
    bm25 = round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)
    result["bm25"] = {"ndcg@10": bm25, "beir_paper": BEIR_BM25_SCIFACT, "difference": round(bm25 - BEIR_BM25_SCIFACT, 4)}
    print("bm25", json.dumps(result["bm25"]), flush=True)
    result["hybrid_dense_zero_shot"] = hybrid_section(dense, scifact)
    print("hybrid", json.dumps(result["hybrid_dense_zero_shot"]), flush=True)

    vectors = {}

    def dense_exact(q, allowed):
        if "v" not in vectors:
            import faiss

            vectors["v"] = faiss.read_index(str(args.work / "dense" / "dense.faiss")).reconstruct_n(0, len(dense))
        scores = np.where(allowed, vectors["v"] @ q[0], -np.inf)
        top = np.lexsort((np.arange(len(scores)), -scores))[:10]
        return [int(p) for p in top if np.isfinite(scores[p])]

    result["filters_dense"] = filter_section(dense, texts, dense_exact)
    plaid_corpus = corpus_with_bucket(scifact, args.work / "corpus_plaid.jsonl", args.plaid_docs)
    if not args.reuse:
        t = time.perf_counter()
        embedctl.Index.build(plaid_corpus, args.work / "plaid", overrides=["model.kind=colbert"], overwrite=True)
        builds["plaid"] = {"seconds": round(time.perf_counter() - t, 2), "docs": args.plaid_docs or "all"}
    plaid = embedctl.Index.open(args.work / "plaid")
    searcher = plaid.session.retriever.searcher

    def plaid_exact(q, allowed):
        return searcher.search_exhaustive(q[0], 10, allowed=allowed)[0].tolist()

    result["filters_plaid"] = filter_section(plaid, texts, plaid_exact)
    result["plaid_docs"] = args.plaid_docs or "all"
    write_result("filters", result, args.out)


def write_q(work: Path, qids, texts) -> Path:
    path = work / "test_queries.tsv"
    path.write_text("".join(f"{q}\t{t}\n" for q, t in zip(qids, texts, strict=True)), encoding="utf-8")
    return path


if __name__ == "__main__":
    main()
