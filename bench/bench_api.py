"""The Python API's cost over the engine: ``python bench/bench_api.py [--docs N] [--kinds plaid,dense]``.

For each index kind (PLAID with minilm as an untrained ColBERT, dense with minilm) on SciFact, built with
``embedctl.Index.build`` under bench/work/api/:

- ``Index.search(query, k)`` of one query against the engine call it wraps (``SearchSession.search_pids``
  plus the id lookup), interleaved query by query so that load on the host hits both alike: p50 and the
  ratio of the medians (target: within 5%);
- ``Index.search(list of 100 queries, k)`` against 100 single calls, 5 rounds alternating: queries/s of each
  (medians) and the median of the per-round ratios (target: >= 2x);
- nDCG@10 on the test queries through ``Index.rank_file`` (the figure ``embedctl search --qrels`` gives).

Writes bench/results/<machine kind>/api.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchdata import find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402

KIND_OVERRIDES = {"plaid": ["model.kind=colbert"], "dense": []}


def corpus_slice(scifact: Path, n: int, out: Path) -> Path:
    """The first ``n`` documents of corpus.jsonl (all when n is 0)."""
    lines = (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join(lines[:n] if n else lines) + "\n", encoding="utf-8")
    return out


def single_vs_engine(idx: embedctl.Index, queries: list[str], k: int) -> dict:
    session = idx.session
    api, engine = [], []
    for q in queries:  # interleaved: the same load on both
        t = time.perf_counter()
        pids, _ = session.search_pids([q], k)[0]
        session.docs.ids_of(pids)
        engine.append(time.perf_counter() - t)
        t = time.perf_counter()
        idx.search(q, k)
        api.append(time.perf_counter() - t)
    api_p50, engine_p50 = statistics.median(api), statistics.median(engine)
    return {"queries": len(queries), "api_p50_ms": round(1000 * api_p50, 3),
            "engine_p50_ms": round(1000 * engine_p50, 3), "api_over_engine": round(api_p50 / engine_p50, 4)}


def batched_vs_single(idx: embedctl.Index, queries: list[str], k: int, rounds: int = 5) -> dict:
    """100 single calls against one call of the same 100 queries, ``rounds`` times alternating (so that
    load on the host hits both alike): the medians of each and the median of the per-round ratios."""
    batch = queries[:100]
    single, batched, ratios = [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        for q in batch:
            idx.search(q, k)
        single.append(time.perf_counter() - t)
        t = time.perf_counter()
        idx.search(batch, k)
        batched.append(time.perf_counter() - t)
        ratios.append(single[-1] / batched[-1])
    single_s, batched_s = statistics.median(single), statistics.median(batched)
    return {"queries": len(batch), "rounds": rounds, "single_qps": round(len(batch) / single_s, 2),
            "batched_qps": round(len(batch) / batched_s, 2),
            "batched_over_single": round(statistics.median(ratios), 3),
            "ratio_per_round": [round(r, 3) for r in ratios]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=0, help="index the first N documents (0: all 5,183)")
    ap.add_argument("--kinds", default="plaid,dense")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "api")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/api.json)")
    ap.add_argument("--reuse", action="store_true", help="search the indexes an earlier run left in --work (no build)")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    qids, queries, qrels = queries_of(scifact, "test")
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = corpus_slice(scifact, args.docs, args.work / "corpus.jsonl")
    result: dict = {"docs": args.docs or "all", "test_queries": len(queries), "kinds": {}}
    for kind in args.kinds.split(","):
        t = time.perf_counter()
        path = args.work / "indexes" / kind
        if not args.reuse:
            embedctl.Index.build(corpus, path, overrides=KIND_OVERRIDES[kind], overwrite=True)
        build_s = time.perf_counter() - t
        idx = embedctl.Index.open(path)
        idx.search(queries[0], 10)  # load the model and the arrays before timing
        row = {"build_s": None if args.reuse else round(build_s, 2), "num_docs": len(idx)}
        for k in (10, 100):
            row[f"single_k{k}"] = single_vs_engine(idx, queries, k)
        row["batched_k10"] = batched_vs_single(idx, queries, 10)
        with tempfile.TemporaryDirectory() as tmp:
            qfile = Path(tmp) / "q.tsv"
            qfile.write_text("".join(f"{q}\t{text}\n" for q, text in zip(qids, queries, strict=True)))
            run = {qid: {h.id: h.score for h in hits} for qid, hits in idx.rank_file(qfile, k=100)}
        row["ndcg@10"] = round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)
        result["kinds"][kind] = row
        print(kind, json.dumps(row), flush=True)
    write_result("api", result, args.out)


if __name__ == "__main__":
    main()
