"""PLAID search time per stage, one query at a time on 1 thread: where the milliseconds go.

    python bench/plaid_stages.py --model W/peers-work/minilm-colbert-ai --index runs/bench_plaid/plaid_scifact_all_nbits2

Stages as in embedctl/search/plaid.py: centroid scores, candidates, pruned centroid interaction, full
centroid interaction, final MaxSim (rank). Mean ms per query over the SciFact test queries at k=10 and
k=100 -> --out (default bench/results/<machine-kind>/plaid_stages.json; every run also under bench/work/runs/).
Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_plaid as B  # noqa: E402
from resultfiles import write_result  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--index", required=True)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = p.parse_args()

    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder
    from embedctl.search import plaid as P

    _, texts, _ = B.load_queries(B.find_scifact(), args.queries)
    enc = load_encoder(ModelConfig(name_or_path=args.model, kind="colbert", doc_max_length=180), device="cpu")
    queries = [enc.encode_queries([t])[0] for t in texts]
    searcher = P.PlaidSearcher(args.index, precision=args.precision)
    B.set_threads(1)
    report: dict = {"threads": 1, "model": args.model, "index": args.index, "precision": searcher.precision, "queries": len(queries), "stages_ms": {}}
    for k in (10, 100):
        ncells, threshold, ndocs = P.default_params(k)
        totals = dict.fromkeys(("centroid_scores", "candidates", "pruned", "full", "rank", "total"), 0.0)
        num_candidates = []
        for Q in queries:
            Q = searcher.as_query(Q)
            t0 = time.perf_counter()
            ST = searcher.centroid_scores(Q)
            t1 = time.perf_counter()
            cand = searcher.candidates(ST, ncells)
            t2 = time.perf_counter()
            num_candidates.append(len(cand))
            if len(cand) > ndocs:
                cand = P.top_candidates(cand, searcher.pruned_scores(ST, cand, threshold), ndocs)
            t3 = time.perf_counter()
            keep = max(ndocs // 4, k)
            if len(cand) > keep:
                cand = P.top_candidates(cand, searcher.centroid_interaction(ST, cand), keep)
            t4 = time.perf_counter()
            searcher.rank(Q, ST, cand, k)
            t5 = time.perf_counter()
            for name, a, b in (("centroid_scores", t0, t1), ("candidates", t1, t2), ("pruned", t2, t3),
                               ("full", t3, t4), ("rank", t4, t5), ("total", t0, t5)):
                totals[name] += b - a
        row = {name: round(v / len(queries) * 1e3, 3) for name, v in totals.items()}
        row["mean_candidates"] = int(np.mean(num_candidates))
        report["stages_ms"][f"k{k}"] = row
        print(f"k={k}: {row}")
    write_result("plaid_stages", report, args.out)


if __name__ == "__main__":
    main()
