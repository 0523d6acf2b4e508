"""Filters, the lexical side and hybrid search on SciFact: ``python bench/bench_filters.py [--plaid-docs N]``.

- BM25 alone (the index's lexical side, bm25s; tokenizer settings in embedctl/index/lexical.py) on the
  test queries: nDCG@10 against the BEIR paper's 0.665; lexical build time beside the dense build's.
- Hybrid with zero-shot dense (minilm) against dense alone, on the dense index's documents (``--docs``
  first documents of SciFact, or ``--dense-index``: an index built earlier, e.g. bench_api's): each side's
  top 100 fused (embedctl.search.fusion.fuse, what ``search.mode=hybrid`` runs); fusion and weight chosen on
  a held-out half of the train queries, then measured on test. The lexical side is the dense index's own,
  or (an index built without one) a lexical-only index of the collection it records.
- Filters at 1%, 10%, 25% and 50% selectivity on a field assigned at random (uniform 0..99 per document,
  seed 0; the allowed mask is ``bucket < t``, passed to the retrievers as ``Index.search(filter=)`` passes
  its evaluation), dense (flat) and PLAID (minilm as an untrained ColBERT): share of test queries whose
  filtered top 10 equals the exhaustive filtered top 10 (dense: exact inner products over the allowed
  vectors; PLAID: exact MaxSim over the allowed documents), share returning min(10, passing) hits, and
  retrieval p50 filtered vs unfiltered (pre-encoded queries, interleaved query by query), and the reference's
  own p50 beside them (PLAID: exact MaxSim over the allowed documents, the filter's exact path).

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
from benchdata import find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402
from embedctl.search.fusion import fuse  # noqa: E402

BEIR_BM25_SCIFACT = 0.665
SELECTIVITY = {"1%": 1, "10%": 10, "25%": 25, "50%": 50}


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


def ndcg(docs_ids, qids, rankings, qrels) -> float:
    run = {q: dict(zip(docs_ids(p), map(float, s), strict=True)) for q, (p, s) in zip(qids, rankings, strict=True)}
    return round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)


def side_rankings(idx, texts: list[str], mode: str, depth: int = 100) -> list:
    out = []
    for start in range(0, len(texts), 64):
        out += idx.session.search_pids(texts[start:start + 64], depth, None, mode)
    return out


def hybrid_section(dense, lexical, scifact: Path) -> dict:
    """Fusion settings chosen on held-out train queries, then test; the lexical index's pids are mapped to
    the dense index's through the document ids (the same collection)."""
    ids = dense.session.docs.ids_of
    pid_of = {d: p for p, d in enumerate(ids(np.arange(len(dense.session.docs))))}

    def lex(texts):
        out = []
        for pids, scores in side_rankings(lexical, texts, "lexical"):
            mapped = np.array([pid_of[d] for d in lexical.session.docs.ids_of(pids)], np.int64)
            out.append((mapped, scores))
        return out

    tq, tt, tqrels = queries_of(scifact, "train")
    held = sorted(random.Random(0).sample(range(len(tq)), len(tq) // 2))
    tq, tt = [tq[i] for i in held], [tt[i] for i in held]
    neural_t, lexical_t = side_rankings(dense, tt, "neural"), lex(tt)
    grid = []
    for fusion in ("rrf", "score"):
        for weight in (0.3, 0.4, 0.5, 0.6, 0.7):
            fused = [fuse(n, lx, fusion, weight, 60, 10) for n, lx in zip(neural_t, lexical_t, strict=True)]
            grid.append({"fusion": fusion, "hybrid_weight": weight, "train_ndcg@10": ndcg(ids, tq, fused, tqrels)})
    best = max(grid, key=lambda g: g["train_ndcg@10"])
    qids, texts, qrels = queries_of(scifact, "test")
    neural, lexical_r = side_rankings(dense, texts, "neural"), lex(texts)
    test = {f"{g['fusion']}@{g['hybrid_weight']}": ndcg(ids, qids, [fuse(n, lx, g["fusion"], g["hybrid_weight"], 60, 10)
                                                                   for n, lx in zip(neural, lexical_r, strict=True)],
                                                         qrels) for g in grid}
    return {"docs": len(dense.session.docs), "train_held_out_queries": len(tq), "grid": grid, "chosen": best,
            "neural_ndcg@10": ndcg(ids, qids, neural, qrels), "lexical_ndcg@10": ndcg(ids, qids, lexical_r, qrels),
            "hybrid_ndcg@10_by_setting": test, "hybrid_ndcg@10": test[f"{best['fusion']}@{best['hybrid_weight']}"],
            "note": "nDCG over the index's documents only (a slice: relevant documents outside it count as misses)"}


def filter_section(idx, texts: list[str], exhaustive_top, unfiltered: bool = True) -> dict:
    session = idx.session
    Q = session.encoder.encode_queries(texts, batch_size=64)
    retriever = session.retriever
    bucket = np.random.default_rng(0).integers(0, 100, size=len(session.docs))
    out = {}
    if unfiltered:
        same = sum(retriever.search(Q[i:i + 1], 10)[0][0].tolist() == exhaustive_top(Q[i:i + 1], np.ones(len(bucket), bool))
                   for i in range(len(texts)))
        out["unfiltered"] = {"top10_equal_exhaustive": round(same / len(texts), 4)}
        print("unfiltered", json.dumps(out["unfiltered"]), flush=True)
    for name, below in SELECTIVITY.items():
        allowed = bucket < below
        passing = int(allowed.sum())
        same = full = 0
        filtered_t, plain_t, reference_t, paths, exact_docs = [], [], [], {}, []
        for i in range(len(texts)):
            q = Q[i:i + 1]
            t = time.perf_counter()
            retriever.search(q, 10)
            plain_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            pids, _ = retriever.search(q, 10, allowed=allowed)[0]
            filtered_t.append(time.perf_counter() - t)
            params = getattr(getattr(retriever, "searcher", None), "last_params", {})
            path = params.get("filter_path")
            if path:
                paths[path] = paths.get(path, 0) + 1
            if "filter_exact_docs" in params:  # PLAID's filtered candidate path: documents it scored exactly
                exact_docs.append(params["filter_exact_docs"])
            t = time.perf_counter()
            top = exhaustive_top(q, allowed)
            reference_t.append(time.perf_counter() - t)
            same += pids.tolist() == top
            full += len(pids) == min(10, passing)
        p50_f, p50_u = statistics.median(filtered_t), statistics.median(plain_t)
        out[name] = {"passing_docs": passing, "top10_equal_exhaustive": round(same / len(texts), 4),
                     "k_hits_when_k_pass": round(full / len(texts), 4), "filtered_p50_ms": round(1000 * p50_f, 3),
                     "unfiltered_p50_ms": round(1000 * p50_u, 3), "filtered_over_unfiltered": round(p50_f / p50_u, 3),
                     # the reference's own time (PLAID: exact MaxSim over the allowed documents, the path the filter
                     # cost model took for every query here before the candidate path was measured to keep the bound)
                     "reference_p50_ms": round(1000 * statistics.median(reference_t), 3),
                     "reference_over_unfiltered": round(statistics.median(reference_t) / p50_u, 3)}
        if paths:  # PLAID: how many queries took exact MaxSim over the allowed documents vs the candidate path
            out[name]["paths"] = paths
        if exact_docs:
            out[name]["candidate_path_docs_scored_exactly"] = {
                "p50": int(np.median(exact_docs)), "p90": int(np.percentile(exact_docs, 90)), "max": int(max(exact_docs))}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=2000, help="dense and PLAID indexes of the first N documents (0: all)")
    ap.add_argument("--dense-index", type=Path, help="search this dense index (minilm) instead of building one")
    ap.add_argument("--plaid-index", action="append", help="search this PLAID index (minilm as ColBERT) instead")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "filters")
    ap.add_argument("--plaid-only", action="store_true",
                    help="only the PLAID filter section, on --plaid-index (repeatable NAME=FOLDER or FOLDER); "
                         "writes filters_plaid.json")
    ap.add_argument("--dense-only", action="store_true",
                    help="only the dense filter section, on --dense-index (an index of SciFact documents built "
                         "earlier); writes filters_dense.json")
    ap.add_argument("--queries", type=int, default=0,
                    help="--plaid-only / --dense-only: the first N test queries (0: all 300)")
    ap.add_argument("--skip-unfiltered", action="store_true",
                    help="--plaid-only: leave out the unfiltered top-10 agreement (an exhaustive MaxSim over every "
                         "document per query: the slowest part on a large index)")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/filters.json)")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    if args.plaid_only:
        return plaid_only(args, scifact)
    if args.dense_only:
        return dense_only(args, scifact)
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict = {"host": "loaded (shared 2-core machine, load average ~19): timings are ratios within a run",
                    "tokenizer": "bm25s: lowercase, (?u)\\b\\w\\w+\\b, English stopwords, no stemmer "
                                 "(PyStemmer / snowballstemmer not installed); BM25 lucene k1=1.5 b=0.75"}
    full = corpus_with_bucket(scifact, args.work / "corpus_full.jsonl")
    t = time.perf_counter()
    lexical_full = embedctl.Index.build(full, args.work / "lexical_full", overrides=["index.kind=lexical"],
                                        overwrite=True)
    builds = {"lexical_full": {"docs": len(lexical_full), "seconds": round(time.perf_counter() - t, 2),
                               "lexical_s": lexical_full.summary["metadata"]["timings"].get("lexical_s")}}
    qids, texts, qrels = queries_of(scifact, "test")
    run = {q: {h.id: h.score for h in hits} for q, hits in lexical_full.rank_file(write_q(args.work, qids, texts), k=100)}
    bm25 = round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)
    result["bm25"] = {"ndcg@10": bm25, "beir_paper": BEIR_BM25_SCIFACT, "difference": round(bm25 - BEIR_BM25_SCIFACT, 4)}
    print("bm25", json.dumps(result["bm25"]), flush=True)

    built = {}
    plaid_given = Path(args.plaid_index[0].rpartition("=")[2]) if args.plaid_index else None
    for kind, given, overrides in (("dense", args.dense_index, []), ("plaid", plaid_given, ["model.kind=colbert"])):
        if given is None:
            corpus = corpus_with_bucket(scifact, args.work / "corpus.jsonl", args.docs)
            t = time.perf_counter()
            idx = embedctl.Index.build(corpus, args.work / kind, overrides=overrides, overwrite=True)
            timings = idx.summary["metadata"]["timings"]
            builds[kind] = {"docs": len(idx), "seconds": round(time.perf_counter() - t, 2),
                            "lexical_s": timings.get("lexical_s")}
        else:
            idx = embedctl.Index.open(given)
            builds[kind] = {"docs": len(idx), "reused": str(given)}
        built[kind] = idx
    result["builds"] = builds
    dense = built["dense"]
    if dense.session.generation.segments[0].lexical is not None:
        lexical = dense
    else:
        lexical = embedctl.Index.build(dense.session.meta["collection"], args.work / "lexical_slice",
                                       overrides=["index.kind=lexical"], overwrite=True)
    result["hybrid_dense_zero_shot"] = hybrid_section(dense, lexical, scifact)
    print("hybrid", json.dumps(result["hybrid_dense_zero_shot"]), flush=True)

    result["filters_dense"] = filter_section(dense, texts, dense_reference(dense))
    searcher = built["plaid"].session.retriever.searcher

    def plaid_exact(q, allowed):
        return searcher.search_exhaustive(q[0], 10, allowed=allowed)[0].tolist()

    result["filters_plaid"] = filter_section(built["plaid"], texts, plaid_exact)
    result["filters_plaid"]["reference"] = PLAID_REFERENCE
    write_result("filters", result, args.out)


PLAID_REFERENCE = ("exhaustive filtered MaxSim (search_exhaustive with the allowed mask) over the same stored 2-bit "
                   "vectors as PLAID's final stage: agreement measures candidate generation alone")


def plaid_only(args, scifact: Path) -> None:
    """The PLAID filter section alone, on each --plaid-index (issue 34's figures, indexes built earlier)."""
    if not args.plaid_index:
        sys.exit("--plaid-only needs --plaid-index NAME=FOLDER (a PLAID index of SciFact documents)")
    _, texts, _ = queries_of(scifact, "test")
    texts = texts[:args.queries] if args.queries else texts
    result: dict = {"host": "loaded (shared 2-core machine, several engineers): timings are ratios within a run",
                    "reference": PLAID_REFERENCE, "queries": len(texts), "indexes": {}}
    for spec in args.plaid_index:
        name, _, folder = spec.rpartition("=")
        idx = embedctl.Index.open(Path(folder))
        searcher = idx.session.retriever.searcher

        def plaid_exact(q, allowed, searcher=searcher):
            return searcher.search_exhaustive(q[0], 10, allowed=allowed)[0].tolist()

        print(name or folder, len(idx), flush=True)
        result["indexes"][name or folder] = {"docs": len(idx), **filter_section(idx, texts, plaid_exact,
                                                                                  not args.skip_unfiltered)}
    write_result("filters_plaid", result, args.out)


def dense_reference(dense):
    """Exact inner products over the allowed vectors of a (flat) dense index: the top 10 pids."""
    vectors = {}

    def dense_exact(q, allowed):
        if "v" not in vectors:
            import faiss

            vectors["v"] = faiss.read_index(str(dense.path / "dense.faiss")).reconstruct_n(0, len(dense))
        scores = np.where(allowed, vectors["v"] @ q[0], -np.inf)
        top = np.lexsort((np.arange(len(scores)), -scores))[:10]
        return [int(p) for p in top if np.isfinite(scores[p])]

    return dense_exact


def dense_only(args, scifact: Path) -> None:
    """The dense filter section alone, on --dense-index (issue 34's figures, an index built earlier)."""
    if not args.dense_index:
        sys.exit("--dense-only needs --dense-index FOLDER (a dense index of SciFact documents)")
    _, texts, _ = queries_of(scifact, "test")
    texts = texts[:args.queries] if args.queries else texts
    dense = embedctl.Index.open(args.dense_index)
    result = {"host": "shared 2-core machine, several engineers: timings are ratios within a run",
              "reference": "exact inner products over the allowed vectors", "queries": len(texts),
              "docs": len(dense), "filters_dense": filter_section(dense, texts, dense_reference(dense))}
    write_result("filters_dense", result, args.out)


def write_q(work: Path, qids, texts) -> Path:
    path = work / "test_queries.tsv"
    path.write_text("".join(f"{q}\t{t}\n" for q, t in zip(qids, texts, strict=True)), encoding="utf-8")
    return path


if __name__ == "__main__":
    main()
