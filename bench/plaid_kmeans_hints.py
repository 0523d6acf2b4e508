"""k-means on real ColBERT vectors, each step without and with the previous assignment as hints (the native backend).

    python bench/plaid_kmeans_hints.py --index bench/work/plaid_scifact_all_nbits2 [--vectors 262144]
        [--centroids 8192] [--rounds 2] [--threads 2] [--out FILE]

From its second iteration on, kmeans.train_centroids hands the backend each row's previous assignment; the int8
kernel starts the row's scan from it (embedctl/index/plaid/_nearest_scan.h: seed_row). Synthetic clustered
vectors (bench/plaid_backends.py) leave nothing to save there: their nearest centroid stands far above the rest.
Real ones do not (on SciFact a window of 0.05 below a row's best holds 2.3 centroids), so this bench decompresses
a seeded sample of an index's vectors (unit vectors, as compression sees them, approximately) and trains
--centroids centroids on them, 4 iterations, the runs alternating hinted / unhinted, --rounds times. Reported:
the median seconds of each k-means step per mode, and whether both modes trained the same centroids. Writes
--out (default bench/results/<machine-kind>/plaid_kmeans_hints.json; every run also under bench/work/runs/).
Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchdata import index_vectors  # noqa: E402
from resultfiles import write_result  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True, help="a PLAID index folder (its plaid/ arrays are read)")
    p.add_argument("--vectors", type=int, default=262_144, help="vectors drawn (seeded) from chunk 0")
    p.add_argument("--centroids", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import torch

    from embedctl.index.plaid import kmeans
    from embedctl.index.plaid.backends import index_backend

    torch.set_num_threads(args.threads)
    _, x = index_vectors(args.index, args.vectors)
    backend = index_backend("cpu")
    steps: dict[str, list[list[float]]] = {"unhinted": [], "hinted": []}
    trained: dict[str, np.ndarray] = {}
    real_step = type(backend).kmeans_step
    for _ in range(args.rounds):
        for mode in ("unhinted", "hinted"):
            times: list[float] = []

            def step(self, x, centroids, sq_norms=None, hints=None, times=times, mode=mode):
                t = time.perf_counter()
                out = real_step(self, x, centroids, sq_norms, hints if mode == "hinted" else None)
                times.append(time.perf_counter() - t)
                return out

            type(backend).kmeans_step = step
            try:
                trained[mode] = kmeans.train_centroids(x, args.centroids, niters=4, seed=0, backend=backend)
            finally:
                type(backend).kmeans_step = real_step
            steps[mode].append(times)
            print(mode, [round(t, 3) for t in times], flush=True)
    median = {mode: [round(statistics.median(r[i] for r in runs), 4) for i in range(len(runs[0]))]
              for mode, runs in steps.items()}
    write_result("plaid_kmeans_hints", {
        "index": str(args.index), "vectors": int(len(x)), "centroids": args.centroids, "threads": args.threads,
        "rounds": args.rounds, "backend": backend.describe(), "step_s_median": median,
        "steps_2_to_4_s": {mode: round(sum(m[1:]), 3) for mode, m in median.items()},
        "same_centroids": bool(np.array_equal(trained["hinted"], trained["unhinted"]))}, args.out)


if __name__ == "__main__":
    main()
