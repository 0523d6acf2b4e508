"""PLAID on SciFact: index time (encode vs the rest), bytes/vector, peak RSS, search latency, QPS, quality.

    python bench/bench_plaid.py [--model minilm|STANFORD_FOLDER] [--nbits 2] [--limit N] [--sizes 2600,5183]
                                [--reuse] [--queries 300] [--out FILE]

- Indexing runs in a child process (`python bench/plaid_build.py build`), so its peak RSS (ru_maxrss
  of the child) is the indexer's own; `--sizes` indexes several collection sizes to show RSS vs size.
- Search runs here: query encoding timed alone (one query at a time), then PlaidSearcher.search at k=10
  and k=100 with 1 thread and all threads (p50/p95 per query, QPS), then exhaustive MaxSim as the quality
  reference (nDCG@10, Recall@100 with pytrec_eval on qrels/test.tsv).
- Peers' published figures on this machine kind (../shared/peers/results) are copied beside ours.
- Writes --out (default bench/results/<machine-kind>/plaid.json) and every run under bench/work/runs/.
Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from benchdata import find_scifact
from machine import has_bf16_matrix_units
from resultfiles import latest_path, write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_index(args, sf: Path, out: Path, limit: int | None) -> dict:
    cmd = [sys.executable, str(REPO / "bench" / "plaid_build.py"), "build", "--collection", str(sf / "corpus.jsonl"),
           "--out", str(out), "--model", args.model, "--nbits", str(args.nbits), "--doc-max-length",
           str(args.doc_max_length), "--no-progress", "--kmeans-points-per-centroid", str(args.kmeans_points_per_centroid),
           "--assign-precision", args.assign_precision]
    if limit:
        cmd += ["--limit", str(limit)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"indexing failed:\n{proc.stderr[-4000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    t = summary["timings"]
    rest = t["total_s"] - t["encode_s"]
    return {"num_docs": summary["num_docs"], "wall_s": round(wall, 2), "encode_s": round(t["encode_s"], 2),
            "rest_s": round(rest, 2), "rest_over_encode": round(rest / max(t["encode_s"], 1e-9), 4),
            "phases_s": {k: round(v, 2) for k, v in t.items()}, "num_embeddings": summary["num_embeddings"],
            "num_partitions": summary["num_partitions"], "bytes": summary["bytes"],
            "bytes_per_vector": round(summary["bytes_per_vector"], 2),
            "peak_rss_mb": summary.get("peak_rss_mb"), "peak_rss_note": "ru_maxrss of the indexing process itself"}


def load_queries(sf: Path, n: int) -> tuple[list[str], list[str], dict]:
    from embedctl.util.qrels import read_qrels

    qrels = read_qrels(str(sf / "qrels" / "test.tsv"))
    texts = {}
    for line in (sf / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        texts[row["_id"]] = row["text"]
    qids = [q for q in qrels if q in texts][:n]
    return qids, [texts[q] for q in qids], {q: qrels[q] for q in qids}


def doc_ids(sf: Path, limit: int | None) -> list[str]:
    ids = []
    for line in (sf / "corpus.jsonl").read_text().splitlines():
        if line.strip():
            ids.append(json.loads(line)["_id"])
    return ids[:limit] if limit else ids


def evaluate(run: dict, qrels: dict) -> dict:
    import pytrec_eval

    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    res = ev.evaluate(run)
    return {"nDCG@10": round(float(np.mean([r["ndcg_cut_10"] for r in res.values()])), 4),
            "Recall@100": round(float(np.mean([r["recall_100"] for r in res.values()])), 4)}


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:
        pass


def stats(xs: list[float]) -> dict:
    a = np.asarray(xs) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "mean_ms": round(float(a.mean()), 3), "n": len(xs)}


def bench_search(args, index_dir: Path, sf: Path, limit: int | None) -> dict:
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder
    from embedctl.search.plaid import PlaidSearcher

    qids, texts, qrels = load_queries(sf, args.queries)
    pids = doc_ids(sf, limit)
    t0 = time.perf_counter()
    enc = load_encoder(ModelConfig(name_or_path=args.model, kind="colbert", doc_max_length=args.doc_max_length,
                                   attend_to_mask_tokens=args.attend_to_mask_tokens), device="cpu")
    model_load = time.perf_counter() - t0
    Q0 = enc.encode_queries(texts[:1])[0]
    t0 = time.perf_counter()
    searcher = PlaidSearcher(index_dir, precision=args.search_precision)
    t_load = time.perf_counter() - t0
    searcher.search(Q0, 10)
    cold = time.perf_counter() - t0
    out: dict = {"precision": searcher.precision, "model_load_s": round(model_load, 3), "index_load_s": round(t_load, 3),
                 "cold_start_s (index load + first query retrieval)": round(cold, 3), "runs": {}}
    all_threads = os.cpu_count() or 1
    Qs = None
    for threads in sorted({1, all_threads}):
        set_threads(threads)
        enc_times, Qs = [], []
        for text in texts:
            t = time.perf_counter()
            Qs.append(enc.encode_queries([text])[0])
            enc_times.append(time.perf_counter() - t)
        out["runs"][f"threads{threads}_query_encode"] = stats(enc_times)
        for k in (10, 100):
            for Q in Qs[:5]:
                searcher.search(Q, k)  # warm-up
            lat, run = [], {}
            t_all = time.perf_counter()
            for qid, Q in zip(qids, Qs, strict=True):
                t = time.perf_counter()
                p, s = searcher.search(Q, k)
                lat.append(time.perf_counter() - t)
                run[qid] = {pids[int(i)]: float(x) for i, x in zip(p, s, strict=True)}
            total = time.perf_counter() - t_all
            e2e = [a + b for a, b in zip(lat, enc_times, strict=True)]
            out["runs"][f"threads{threads}_k{k}"] = {
                "retrieval": stats(lat), "end_to_end": stats(e2e), "qps_retrieval": round(len(Qs) / total, 1),
                "params": dict(searcher.last_params), **evaluate(run, qrels)}
    set_threads(all_threads)
    t = time.perf_counter()
    run = {}
    for qid, Q in zip(qids, Qs, strict=True):
        p, s = searcher.search(Q, 100, exhaustive=True)
        run[qid] = {pids[int(i)]: float(x) for i, x in zip(p, s, strict=True)}
    out["exhaustive"] = {**evaluate(run, qrels), "mean_ms": round(1000 * (time.perf_counter() - t) / len(Qs), 1)}
    ref = out["exhaustive"]["nDCG@10"]
    for r in out["runs"].values():
        if "nDCG@10" in r:
            r["nDCG@10_vs_exhaustive"] = round(r["nDCG@10"] / ref, 4) if ref else None
    return out


def peers() -> dict:
    res = REPO.parent / "shared" / "peers" / "results"
    out = {}
    for name in ("colbertai_index.json", "colbertai_search.json", "pylate_plaid_nbits4.json"):
        p = res / name
        if p.is_file():
            out[name] = json.loads(p.read_text())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--nbits", type=int, default=2)
    p.add_argument("--doc-max-length", type=int, default=180)
    p.add_argument("--kmeans-points-per-centroid", type=int, default=32,
                   help="index.kmeans_points_per_centroid (faiss's default is 256)")
    p.add_argument("--assign-precision", default="auto", choices=["auto", "fp32", "bf16", "int16", "int8"],
                   help="index.assign_precision (k-means and compression)")
    p.add_argument("--search-precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="search.precision (the final MaxSim)")
    p.add_argument("--attend-to-mask-tokens", action="store_true",
                   help="let queries attend to their [MASK] padding (default off, as colbert-ai and PyLate do)")
    p.add_argument("--limit", type=int, default=None, help="index only the first N documents (smoke test)")
    p.add_argument("--sizes", default="", help="extra collection sizes to index for the RSS-vs-size figure")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--work", default=str(REPO / "bench" / "work"))
    p.add_argument("--reuse", action="store_true", help="reuse an existing index in --work")
    p.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sf = find_scifact()
    work = Path(args.work)
    index_dir = work / f"plaid_scifact_{args.limit or 'all'}_nbits{args.nbits}"
    result: dict = {"machine": {"cpus": os.cpu_count()}, "model": args.model, "nbits": args.nbits,
                    "doc_max_length": args.doc_max_length}
    import torch

    result["machine"]["torch"] = torch.__version__
    result["machine"]["cpu_bf16_matrix_units"] = has_bf16_matrix_units()  # AMX or AVX512-BF16: bf16 paths under auto
    out = Path(args.out) if args.out else latest_path("plaid")
    previous = json.loads(out.read_text()) if out.is_file() else {}
    if args.reuse and (index_dir / "embedctl_index.json").is_file():
        result["index"] = {**previous.get("index", {}), "note": "index reused from an earlier run of this script"}
    else:
        import shutil

        shutil.rmtree(index_dir, ignore_errors=True)
        result["index"] = build_index(args, sf, index_dir, args.limit)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    # a reused index keeps the RSS-vs-size figures of the run that built it unless new sizes are asked for
    result["index_rss_by_size"] = previous.get("index_rss_by_size", []) if args.reuse and not sizes else []
    for n in sizes:
        d = work / f"plaid_scifact_{n}_rss"
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        result["index_rss_by_size"].append(build_index(args, sf, d, n))
        shutil.rmtree(d, ignore_errors=True)
    result["search"] = bench_search(args, index_dir, sf, args.limit)
    result["peers"] = peers()
    print(json.dumps({k: v for k, v in result.items() if k != "peers"}, indent=1))
    write_result("plaid", result, out)


if __name__ == "__main__":
    main()
