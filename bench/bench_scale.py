"""Scale bench: (a) `embedctl index` (PLAID, minilm as ColBERT) on 1 vs 2 torchrun ranks, one thread each:
encode throughput, byte-identical index, peak RSS per rank; (b) the PLAID engine fed synthetic vectors (a fixed
mixture: no encoder) at growing sizes: time per phase, peak RSS, disk, search p50 at k=10 / k=100.

    .venv/bin/python bench/bench_scale.py [--docs 2000] [--chunk-size 250] [--sizes 250000,1000000] [--skip-ranks]
                                          [--num-partitions C]

Writes bench/results/<machine-kind>/scale.json (bench/resultfiles.py). Each measurement runs in its own
process (peak RSS is the process's ru_maxrss).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from resultfiles import write_result  # noqa: E402

RSS_LINE = "EMBEDCTL_BENCH_RSS_KB="
DOC_LEN, DIM = 128, 128


def tree_sha(folder: Path) -> dict[str, str]:
    skip = {"embedctl_index.json", "versions.json", "resolved_config.yaml", "overrides.yaml"}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


# -- (a) ranks on SciFact ---------------------------------------------------------------------------------
RSS_WRAPPER = """import resource, runpy, sys, atexit
atexit.register(lambda: print("RSS_LINE" + str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), file=sys.stderr, flush=True))
sys.argv = ["embedctl"] + sys.argv[1:]
runpy.run_module("embedctl", run_name="__main__")
""".replace("RSS_LINE", RSS_LINE)


def ranks_run(n: int, corpus: Path, root: Path, chunk_size: int) -> dict:
    wrapper = root / "rss_embedctl.py"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(RSS_WRAPPER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "EMBEDCTL_PROGRESS_EVERY_S": "1000"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), str(wrapper),
           "index", "--collection", str(corpus), "--root", str(root), "--name", "sf", "model.kind=colbert",
           "index.backend=native", f"index.chunk_size={chunk_size}"]
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    meta = json.loads((root / "sf" / "embedctl_index.json").read_text())
    rss = [int(x) // 1024 for x in re.findall(RSS_LINE + r"(\d+)", done.stderr)]
    t = meta["timings"]
    # every rank's encoding (one rank: rank 0's): throughput is the documents over the slowest rank's time
    per_rank = meta["build"].get("ranks") or [{"encode_s": t["encode_s"], "encoded_docs": meta["build"]["encoded_docs"]}]
    slowest = max(r["encode_s"] for r in per_rank)
    return {"ranks": n, "wall_s": round(wall, 1), "build_s": t["build_s"],
            "encode_s_per_rank": [r["encode_s"] for r in per_rank],
            "encoded_docs_per_rank": [r["encoded_docs"] for r in per_rank],
            "docs_per_s_encode_all_ranks": round(sum(r["encoded_docs"] for r in per_rank) / slowest, 1),
            "kmeans_s": t["kmeans_s"], "compress_s_rank0": t["compress_s"], "ivf_s": t["ivf_s"],
            "chunks": meta["plaid"]["num_chunks"] if "num_chunks" in meta.get("plaid", {}) else None,
            "docs": meta["num_docs"],
            "docs_per_s_build": round(meta["num_docs"] / t["build_s"], 1),
            "peak_rss_mb_per_rank": sorted(rss, reverse=True)}


# -- (b) synthetic scale run --------------------------------------------------------------------------------
SYNTH = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[3])
from embedctl.config.sections.index import IndexConfig
from embedctl.index.build import build_plaid_index
from embedctl.search.plaid import PlaidSearcher

DOC_LEN, DIM, TOPICS = DOC_LEN_VALUE, DIM_VALUE, 4096
rng = np.random.default_rng(0)
topics = rng.normal(size=(TOPICS, DIM)).astype(np.float32)
topics /= np.linalg.norm(topics, axis=1, keepdims=True)

class MixtureEncoder:
    # each document (its text is its pid) draws DOC_LEN vectors around 4 topics of a fixed mixture
    kind, dim = "colbert", DIM
    def encode_documents(self, items, batch_size=32, progress=False):
        pids = np.array([int(t) for t in items], dtype=np.int64)
        out = np.empty((len(pids) * DOC_LEN, DIM), np.float32)
        for j, pid in enumerate(pids):
            r = np.random.default_rng(int(pid))
            v = topics[r.choice(TOPICS, 4)][r.integers(0, 4, DOC_LEN)] + 0.6 / np.sqrt(DIM) * r.standard_normal((DOC_LEN, DIM), dtype=np.float32)
            out[j * DOC_LEN:(j + 1) * DOC_LEN] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out, np.full(len(pids), DOC_LEN, np.int64)

n_vec, out = int(sys.argv[1]), sys.argv[2]
n_docs = n_vec // DOC_LEN
# argv[4]: index.num_partitions, or "default" (colbert-ai's 2^floor(log2(16 sqrt(vectors))), growing with size)
cfg = IndexConfig(nbits=2, backend="native", num_partitions=None if sys.argv[4] == "default" else int(sys.argv[4]))
t = time.perf_counter()
s = build_plaid_index(MixtureEncoder(), [str(i) for i in range(n_docs)], out, cfg, progress=False)
total = time.perf_counter() - t
rss_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
searcher = PlaidSearcher(out)
enc = MixtureEncoder()
lat = {}
for k in (10, 100):
    times = []
    for q in range(60):
        v, _ = enc.encode_documents([str(10**9 + q)])
        t0 = time.perf_counter(); searcher.search(v[:32], k); times.append(time.perf_counter() - t0)
    lat[f"search_p50_ms_k{k}"] = round(1000 * float(np.median(times[10:])), 2)
print(json.dumps({"vectors": int(s["num_embeddings"]), "docs": n_docs, "centroids": s["num_partitions"],
                  "chunks": s["num_chunks"], "disk_mb": round(s["bytes"] / 2**20, 1),
                  "bytes_per_vector": round(s["bytes_per_vector"], 2), "total_s": round(total, 1),
                  "phases_s": {k: v for k, v in s["timings"].items() if k != "total_s"},
                  "peak_rss_mb_build": rss_build,
                  "peak_rss_mb_with_search": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, **lat}))
""".replace("DOC_LEN_VALUE", str(DOC_LEN)).replace("DIM_VALUE", str(DIM))


def synthetic_run(n_vec: int, work: Path, num_partitions: int | None = None) -> dict:
    script = work / "synth.py"
    script.write_text(SYNTH)
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, str(script), str(n_vec), str(work / f"synth{n_vec}"), str(REPO),
                           str(num_partitions or "default")],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000, help="SciFact documents for the ranks run (0: all 5183)")
    ap.add_argument("--chunk-size", type=int, default=250,
                    help="index.chunk_size of the ranks run: the chunks are what ranks share out (the default, "
                         "min(25000, N + 1), makes a 2000-document slice one chunk that one rank encodes)")
    ap.add_argument("--sizes", default="250000,1000000", help="synthetic vector counts")
    ap.add_argument("--num-partitions", type=int, default=None,
                    help="fixed index.num_partitions for every synthetic size (default: the size-dependent default): "
                         "separates the engine's time per vector from the growth of the centroid count")
    ap.add_argument("--skip-ranks", action="store_true")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None, help="result file (default: the latest scale.json of this machine kind)")
    args = ap.parse_args()
    result: dict = {"note": args.note, "num_partitions": args.num_partitions or "default"}
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        work = Path(tmp)
        if not args.skip_ranks:
            sys.path.insert(0, str(REPO / "tests"))
            from support.scifact_slice import write_slice

            scifact = REPO.parent / "shared" / "data" / "scifact"
            scifact = scifact if scifact.is_dir() else Path("/work/shared/data/scifact")
            corpus = scifact / "corpus.jsonl" if args.docs == 0 else \
                write_slice(scifact, work / "slice", num_docs=args.docs, num_queries=5)["corpus"]
            runs = [ranks_run(n, corpus, work / f"r{n}", args.chunk_size) for n in (1, 2)]
            same = tree_sha(work / "r1" / "sf") == tree_sha(work / "r2" / "sf")
            result["ranks"] = {"corpus": str(corpus.name), "docs": runs[0]["docs"], "runs": runs,
                               "chunk_size": args.chunk_size, "byte_identical": same,
                               # encode throughput: the documents encoded over the slowest rank's encode time
                               "speedup_encode": round(runs[1]["docs_per_s_encode_all_ranks"]
                                                       / runs[0]["docs_per_s_encode_all_ranks"], 2),
                               "speedup_build": round(runs[0]["build_s"] / runs[1]["build_s"], 2)}
            print(json.dumps(result["ranks"], indent=1), flush=True)
        result["synthetic"] = []
        for n_vec in [int(x) for x in args.sizes.split(",") if x]:
            row = synthetic_run(n_vec, work, args.num_partitions)
            result["synthetic"].append(row)
            print(json.dumps(row), flush=True)
    print(write_result("scale", result, args.out))


if __name__ == "__main__":
    main()
