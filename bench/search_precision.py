"""PLAID's final MaxSim at each `search.precision` on SciFact, side by side in one process (issue 36): speed and
fidelity of the float16 table against the float32 one.

    python bench/search_precision.py --index trained-colbert-5183=DIR [--index minilm-5183=DIR] \\
        [--precisions fp32,fp16] [--queries 300] [--out FILE]

For each index (name=folder): the test queries encoded once by the index's encoder; one searcher per precision
(native backend, one thread, default candidates); exhaustive MaxSim at depth 100 in float32 (the quality
reference) and at each precision; then at k=10 and k=100 every query through every precision in turn (so host
load hits all alike). Reported per precision: p50 (wall and the thread's CPU time), nDCG@10 and its share of
float32 exhaustive, and against float32's own ranking: the share of queries with the same top 10 (same pids in
the same order), the share with the same top-k set, and the largest score difference on a document both
return. Writes bench/results/<machine kind>/search_precision.json (see resultfiles.py). Nothing here runs in
`make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from bench_budget import ndcg10
from benchdata import add_index_arguments, find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.index.generations import open_generation  # noqa: E402
from embedctl.search.plaid import PlaidSearcher  # noqa: E402


def agreement(base: list, other: list, k: int) -> dict:
    """Top 10 in the same order, top k as a set, and the largest |score difference| on shared documents."""
    same10 = sum(a[0][:10].tolist() == b[0][:10].tolist() for a, b in zip(base, other, strict=True))
    same_set = sum(set(a[0][:k].tolist()) == set(b[0][:k].tolist()) for a, b in zip(base, other, strict=True))
    diff = 0.0
    for (pa, sa), (pb, sb) in zip(base, other, strict=True):
        common, ia, ib = np.intersect1d(pa, pb, return_indices=True)
        if len(common):
            diff = max(diff, float(np.abs(np.asarray(sa)[ia] - np.asarray(sb)[ib]).max()))
    n = len(base)
    return {"top10_same_order": round(same10 / n, 4), f"top{k}_same_set": round(same_set / n, 4),
            "max_score_diff": float(f"{diff:.3g}")}


def bench_index(name: str, path: Path, scifact: Path, n_queries: int, precisions: list[str]) -> dict:
    import torch

    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    idx = embedctl.Index.open(path, overrides=["search.query_threads=1"])
    session = idx.session
    qids, texts, qrels = queries_of(scifact, "test")
    qids, texts = qids[:n_queries], texts[:n_queries]
    Q = session.encoder.encode_queries(texts, batch_size=64)
    ids_of = session.docs.ids_of
    searchers = {p: PlaidSearcher(open_generation(path), backend="native", precision=p, query_threads=1)
                 for p in precisions}
    exact = {p: [s.search(q, 100, exhaustive=True) for q in Q] for p, s in searchers.items()}
    ref = ndcg10(ids_of, qids, exact["fp32"], qrels)
    out: dict = {"docs": searchers["fp32"].num_docs, "num_partitions": searchers["fp32"].num_partitions,
                 "num_embeddings": int(searchers["fp32"].doclens.sum()), "queries": len(qids),
                 "exhaustive": {p: {"nDCG@10": round(ndcg10(ids_of, qids, r, qrels), 4),
                                    **(agreement(exact["fp32"], r, 100) if p != "fp32" else {})}
                                for p, r in exact.items()}}
    for k in (10, 100):
        for q in Q[:20]:  # warm up
            for s in searchers.values():
                s.search(q, k)
        runs = {p: {"rankings": [], "t": [], "cpu": []} for p in precisions}
        for q in Q:
            for p, s in searchers.items():
                t, c = time.perf_counter(), time.thread_time()
                ranking = s.search(q, k)
                runs[p]["cpu"].append(time.thread_time() - c)
                runs[p]["t"].append(time.perf_counter() - t)
                runs[p]["rankings"].append(ranking)
        row = {}
        for p, r in runs.items():
            n = ndcg10(ids_of, qids, r["rankings"], qrels)
            row[p] = {"p50_ms": round(1000 * statistics.median(r["t"]), 3),
                      "cpu_p50_ms": round(1000 * statistics.median(r["cpu"]), 3),
                      "nDCG@10": round(n, 4), "of_exhaustive_fp32": round(n / ref, 4) if ref else None}
            if p != "fp32":
                row[p].update(agreement(runs["fp32"]["rankings"], r["rankings"], k))
                row[p]["p50_over_fp32"] = round(row[p]["p50_ms"] / row["fp32"]["p50_ms"], 3)
        out[f"k{k}"] = row
        print(name, f"k={k}", row, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_index_arguments(ap, queries=300)
    ap.add_argument("--precisions", default="fp32,fp16", help="search.precision values, fp32 first (the baseline)")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/search_precision.json)")
    args = ap.parse_args()
    precisions = args.precisions.split(",")
    if precisions[0] != "fp32":
        ap.error("--precisions must start with fp32 (the baseline the others are compared with)")
    scifact = find_scifact(args.scifact)
    result: dict = {"threads": 1, "reference": "exhaustive MaxSim in float32 (search.exhaustive, search.precision=fp32)",
                    "indexes": {}}
    for spec in args.index:
        name, _, folder = spec.partition("=")
        result["indexes"][name] = bench_index(name, Path(folder), scifact, args.queries, precisions)
    write_result("search_precision", result, args.out)


if __name__ == "__main__":
    main()
