"""PLAID's candidate generation on SciFact (issue 36): WARP-style candidates (the default), PLAID's adaptive
budget and Stanford ColBERT's table:

    python bench/bench_budget.py --index minilm-2000=DIR --index minilm-5183=DIR [--queries 300] [--out FILE]
                                 [--merge EARLIER_RUN.json]

For each index (name=folder; minilm as an untrained ColBERT: `model.kind=colbert`, or a trained ColBERT):
the test queries encoded once, exhaustive MaxSim (search.exhaustive: the reference, scoring the same
stored vectors as PLAID's final stage) at depth 100, then at k=10 and k=100 the old table (its values
given explicitly: ncells / centroid_score_threshold / ndocs, search.candidates=plaid), PLAID's adaptive
budget (all null, candidates=plaid) and the default (all null, candidates=auto: WARP-style), interleaved
query by query in one process: nDCG@10 and its share of exhaustive, the share of queries whose top 10
equals exhaustive's, retrieval p50 (one thread, pre-encoded queries; wall and the thread's CPU time, which
leaves out a loaded host's waits), adaptive over table and warp over adaptive, and the budget each chose.

Writes bench/results/<machine kind>/budget.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchdata import add_index_arguments, find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402
from embedctl.search.plaid_budget import table_params  # noqa: E402


def ndcg10(ids_of, qids, rankings, qrels) -> float:
    run = {q: dict(zip(ids_of(p), map(float, s), strict=True)) for q, (p, s) in zip(qids, rankings, strict=True)}
    return evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"]


def budget_summary(reports: list[dict]) -> dict:
    cells = [r["ncells"]["mean"] if isinstance(r["ncells"], dict) else r["ncells"] for r in reports]
    if reports and reports[0].get("candidates") == "warp":
        return {"cells_per_token_mean": round(statistics.fmean(cells), 2),
                "estimated_docs_mean": round(statistics.fmean(r["estimated"] for r in reports), 1),
                "pool": sorted({r["pool"] for r in reports})}
    return {"cells_per_token_mean": round(statistics.fmean(cells), 2),
            "threshold_mean": round(statistics.fmean(r["centroid_score_threshold"] for r in reports), 4),
            "threshold_min": round(min(r["centroid_score_threshold"] for r in reports), 4),
            "ndocs": sorted({r["ndocs"] for r in reports})}


def bench_index(name: str, path: Path, scifact: Path, n_queries: int) -> dict:
    import torch

    torch.set_num_threads(1)
    try:  # numpy's BLAS on one thread too (the thread's CPU time below would miss a helper thread's)
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    idx = embedctl.Index.open(path, overrides=["search.query_threads=1"])  # one thread: each query on one too
    s = idx.session
    searcher = s.retriever.searcher
    qids, texts, qrels = queries_of(scifact, "test")
    qids, texts = qids[:n_queries], texts[:n_queries]
    Q = s.encoder.encode_queries(texts, batch_size=64)
    ids_of = s.docs.ids_of
    out: dict = {"docs": searcher.num_docs, "live_docs": searcher.live_docs(), "num_partitions": searcher.num_partitions,
                 "num_embeddings": int(searcher.doclens.sum()),
                 "docs_per_cell_mean": round(float(searcher.ivf_lengths.mean()), 2),
                 "model": s.meta.get("model", {}).get("name_or_path") if isinstance(s.meta.get("model"), dict) else None,
                 "queries": len(qids)}
    exact, ex_t = [], []
    for q in Q:
        t = time.perf_counter()
        exact.append(searcher.search(q, 100, exhaustive=True))
        ex_t.append(time.perf_counter() - t)
    ref = ndcg10(ids_of, qids, exact, qrels)
    out["exhaustive"] = {"nDCG@10": round(ref, 4), "p50_ms": round(1000 * statistics.median(ex_t), 2)}
    print(name, "exhaustive", out["exhaustive"], flush=True)
    for k in (10, 100):
        nc, thr, nd = table_params(k)
        settings = {"table": {"ncells": nc, "centroid_score_threshold": thr, "ndocs": nd, "candidates": "plaid"},
                    "adaptive": {"ncells": None, "centroid_score_threshold": None, "ndocs": None,
                                 "candidates": "plaid"},
                    "warp": {"ncells": None, "centroid_score_threshold": None, "ndocs": None, "candidates": "auto"}}
        runs = {m: {"rankings": [], "t": [], "cpu": [], "same": 0, "params": []} for m in settings}
        for i, q in enumerate(Q):  # interleaved: every setting sees the same host load
            for m, kw in settings.items():
                t, c = time.perf_counter(), time.thread_time()
                p, sc = searcher.search(q, k, **kw)
                runs[m]["cpu"].append(time.thread_time() - c)
                runs[m]["t"].append(time.perf_counter() - t)
                runs[m]["rankings"].append((p, sc))
                runs[m]["same"] += p[:10].tolist() == exact[i][0][:10].tolist()
                runs[m]["params"].append(searcher.last_params)
        row = {}
        for m, r in runs.items():
            n = ndcg10(ids_of, qids, r["rankings"], qrels)
            row[m] = {"settings": settings[m], "nDCG@10": round(n, 4), "of_exhaustive": round(n / ref, 4) if ref else None,
                      "top10_equal_exhaustive": round(r["same"] / len(qids), 4),
                      "p50_ms": round(1000 * statistics.median(r["t"]), 2),
                      "cpu_p50_ms": round(1000 * statistics.median(r["cpu"]), 3), "budget": budget_summary(r["params"])}
        row["adaptive_over_table_p50"] = round(row["adaptive"]["p50_ms"] / row["table"]["p50_ms"], 3)
        row["warp_over_adaptive_cpu_p50"] = round(row["warp"]["cpu_p50_ms"] / row["adaptive"]["cpu_p50_ms"], 3)
        row["exhaustive_over_table_p50"] = round(out["exhaustive"]["p50_ms"] / row["table"]["p50_ms"], 3)
        out[f"k{k}"] = row
        print(name, f"k={k}", {m: {x: row[m][x] for x in ("of_exhaustive", "top10_equal_exhaustive", "p50_ms",
                                                          "cpu_p50_ms")}
                               for m in settings}, row["adaptive_over_table_p50"], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_index_arguments(ap, queries=300)
    ap.add_argument("--merge", action="append", default=[],
                    help="an earlier run's file (bench/work/...): its indexes are kept beside this run's, each with "
                         "the provenance of the run that measured it (on a loaded host, one index per process)")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/budget.json)")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    result: dict = {
        "host": "loaded (shared 2-core machine, several engineers): compare timings only as ratios within this run",
        "reference": "exhaustive MaxSim (search.exhaustive=true) over the same stored 2-bit vectors as PLAID's final "
                     "stage: the shares measure candidate generation alone",
        "threads": 1, "indexes": {}}
    for earlier in args.merge:
        run = json.loads(Path(earlier).read_text(encoding="utf-8"))
        for name, row in run["indexes"].items():
            result["indexes"][name] = {"measured_by": run["provenance"], **row}  # an earlier merge keeps its own
    for spec in args.index:
        name, _, folder = spec.partition("=")
        result["indexes"][name] = bench_index(name, Path(folder), scifact, args.queries)
    write_result("budget", result, args.out)


if __name__ == "__main__":
    main()
