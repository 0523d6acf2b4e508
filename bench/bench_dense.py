"""Dense retrieval with the embedded all-MiniLM-L6-v2 on SciFact test, through embedctl's own engines.

    python bench/bench_dense.py [--scifact DIR] [--max-docs N] [--max-queries N] [--out FILE]

Setup as MTEB/sentence-transformers evaluate this model: documents are ``title + " " + text``, 256 tokens
(queries too), mean pooling, L2-normalised (cosine = inner product), exact faiss Flat index, top 100.
Expected: nDCG@10 = 0.645 +/- 0.003 (MTEB: 64.51). Full run: encoding 5,183 documents takes ~5 minutes on
2 cores. ``--max-docs`` / ``--max-queries`` give a quick smoke run (figures then are not comparable).

Measured: index time split into encoding vs the rest, docs/s; batch search (all queries, QPS); single-query
latency p50/p95 (query encoding and retrieval timed apart) with 1 thread and with all threads; cold start
(open index + load model + first query); nDCG@10, MRR@10, Recall@10, Recall@100. Writes the JSON to --out
(default bench/results/<machine-kind>/dense.json; smoke runs default to bench/work/dense_smoke.json) and
every run under bench/work/runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def prepare(scifact: Path, work: Path, max_docs: int | None, max_queries: int | None) -> dict[str, Path]:
    """Corpus (optionally cut), test queries (those with qrels) and test qrels in ``work``."""
    from embedctl.eval.io import read_qrels

    work.mkdir(parents=True, exist_ok=True)
    qrels = read_qrels(str(scifact / "qrels" / "test.tsv"))
    qids = list(qrels)[:max_queries] if max_queries else list(qrels)
    corpus = scifact / "corpus.jsonl"
    if max_docs:
        lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:max_docs]
        corpus = work / "corpus.jsonl"
        corpus.write_text("".join(lines), encoding="utf-8")
    queries = work / "queries.jsonl"
    keep = set(qids)
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        queries.write_text("".join(line for line in fh if json.loads(line)["_id"] in keep), encoding="utf-8")
    qrels_path = work / "qrels.tsv"
    qrels_path.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q in qids for d, r in qrels[q].items()), encoding="utf-8")
    return {"corpus": corpus, "queries": queries, "qrels": qrels_path}


def overrides(work: Path, paths: dict[str, Path]) -> list[str]:
    return [f"index.collection={paths['corpus']}", f"index.root={work / 'indexes'}", "index.name=scifact",
            "index.kind=dense", "index.dense_type=flat", "index.overwrite=true", "model.name_or_path=minilm",
            "model.kind=biencoder", "model.pooling=mean", "model.normalize=true", "model.doc_max_length=256",
            "model.query_max_length=256", "model.device=cpu"]


def percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values) * 1000
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2), "p95_ms": round(float(np.percentile(arr, 95)), 2),
            "mean_ms": round(float(arr.mean()), 2)}


def single_query_latency(session, texts: list[str], k: int, threads: int) -> dict:
    """Per query: encode one query, then retrieve (one call each), on ``threads`` threads."""
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    enc, ret, total = [], [], []
    encoder, retriever = session.encoder, session.retriever
    encoder.encode_queries(texts[:2])  # warm-up
    for text in texts:
        t0 = time.perf_counter()
        Q = encoder.encode_queries([text], batch_size=1)
        t1 = time.perf_counter()
        retriever.search(Q, k)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        ret.append(t2 - t1)
        total.append(t2 - t0)
    return {"threads": threads, "k": k, "queries": len(texts), "end_to_end": percentiles(total),
            "query_encoding": percentiles(enc), "retrieval": percentiles(ret)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "dense")
    parser.add_argument("--out", type=Path, default=None,
                        help="result file (default: the latest for this machine kind; smoke: bench/work/dense_smoke.json)")
    parser.add_argument("--max-docs", type=int, default=None, help="smoke run: first N documents only")
    parser.add_argument("--max-queries", type=int, default=None, help="smoke run: first N test queries only")
    parser.add_argument("--latency-queries", type=int, default=100, help="queries timed one by one")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import embedctl
    from embedctl.config import load_config
    from embedctl.eval.io import read_qrels
    from embedctl.eval.metrics import evaluate_run

    scifact = find_scifact(args.scifact)
    if args.work.exists():
        shutil.rmtree(args.work)
    paths = prepare(scifact, args.work, args.max_docs, args.max_queries)
    loaded = load_config(None, overrides(args.work, paths))

    t0 = time.perf_counter()
    summary = embedctl.Index.build(None, config=loaded).summary
    index_wall = time.perf_counter() - t0
    meta = json.loads((Path(summary["index"]) / "embedctl_index.json").read_text())

    t0 = time.perf_counter()
    index = embedctl.Index.open(config=loaded)
    index.search("cold start probe", 10)
    cold = time.perf_counter() - t0
    session = index.session  # its timings split encode and retrieve

    results = {}
    for k in (10, 100):
        session.timings.update(encode_s=0.0, retrieve_s=0.0)
        t0 = time.perf_counter()
        rankings = [(q, [(h.id, h.score) for h in hits]) for q, hits in index.rank_file(paths["queries"], k)]
        seconds = time.perf_counter() - t0
        results[f"batch_k{k}"] = {"queries": len(rankings), "seconds": round(seconds, 3),
                                  "qps": round(len(rankings) / seconds, 1),
                                  "encode_s": round(session.timings["encode_s"], 3),
                                  "retrieve_s": round(session.timings["retrieve_s"], 4)}
    metrics = evaluate_run({q: dict(h) for q, h in rankings}, read_qrels(str(paths["qrels"])))
    texts = list(json.loads(line)["text"] for line in paths["queries"].read_text().splitlines())
    texts = texts[: args.latency_queries]
    latency = [single_query_latency(session, texts, k, threads)
               for threads in (1, os.cpu_count() or 1) for k in (10, 100)]

    dense = meta["dense"]
    out = {
        "bench": "dense", "model": "all-MiniLM-L6-v2 (minilm), mean pooling, cosine, 256 tokens, title + ' ' + text",
        "collection": str(paths["corpus"]), "num_docs": meta["num_docs"], "num_queries": len(rankings),
        "smoke": bool(args.max_docs or args.max_queries),
        "metrics": {k: round(v, 4) for k, v in metrics.items()},
        "expected": {"nDCG@10": 0.645, "tolerance": 0.003, "source": "MTEB all-MiniLM-L6-v2 SciFact 64.51"},
        "index": {"wall_s": round(index_wall, 2), "encode_s": dense["encode_s"], "faiss_s": dense["faiss_s"],
                  "read_and_model_load_s": meta["timings"]["prepare_s"],
                  "other_s": round(index_wall - dense["encode_s"] - meta["timings"]["prepare_s"], 2),
                  "docs_per_s": round(meta["num_docs"] / dense["encode_s"], 1),
                  "bytes": (Path(summary["index"]) / "dense.faiss").stat().st_size},
        "cold_start_s": round(cold, 2), "search": results, "latency": latency,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }
    print(json.dumps({"metrics": out["metrics"], "index": out["index"], "cold_start_s": out["cold_start_s"]}, indent=2))
    # a smoke run's figures are not comparable: it never replaces the latest result unless asked to
    write_result("dense", out, args.out or (REPO / "bench" / "work" / "dense_smoke.json" if out["smoke"] else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
