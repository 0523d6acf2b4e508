"""Can exact nearest-centroid assignment skip centroids? A two-level bound measured on a real PLAID index.

    python bench/plaid_assign_pruning.py --index bench/work/colbert/indexes/colbert-infonce [--vectors 20000]

Compression assigns every vector to its nearest centroid: vectors x centroids dot products, and with the
default centroid count (16 sqrt(vectors), rounded down to a power of 2) that grows as vectors^1.5. An exact
sub-linear assignment would group the centroids (k-means over them, G groups with centre g and radius R_g)
and skip every group whose bound x.g + R_g (|x| = 1) is below the best score found, rescoring the rest.
This script measures how much such a search would skip on the index's own centroids and (decompressed)
vectors: the fraction of groups that survive the bound and the centroid dot products per vector
(G + the surviving groups' centroids) against the full scan. Writes bench/results/<kind>/assign_pruning.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchdata import index_vectors  # noqa: E402
from resultfiles import write_result  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True, help="a PLAID index folder (its plaid/ arrays are read)")
    p.add_argument("--vectors", type=int, default=20000, help="vectors drawn (seeded) from chunk 0")
    p.add_argument("--groups", default="64,128,256,512")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import faiss

    codec, x = index_vectors(args.index, args.vectors)  # unit vectors, as compression sees them (approximately)
    cents = codec.centroids_f32()
    best = (x @ cents.T).max(axis=1)
    rows = []
    for g in [int(v) for v in args.groups.split(",")]:
        km = faiss.Kmeans(cents.shape[1], g, niter=20, seed=1)
        km.train(cents)
        group = km.index.search(cents, 1)[1][:, 0]
        sizes = np.bincount(group, minlength=g)
        centre = np.stack([cents[group == j].mean(0) if sizes[j] else np.zeros(cents.shape[1]) for j in range(g)])
        radius = np.array([np.linalg.norm(cents[group == j] - centre[j], axis=1).max() if sizes[j] else 0.0
                           for j in range(g)])
        survive = (x @ centre.T.astype(np.float32) + radius[None]) >= best[:, None] - 1e-5
        dots = g + (survive * sizes[None]).sum(axis=1)
        rows.append({"groups": g, "groups_surviving": round(float(survive.mean()), 3),
                     "dots_per_vector": round(float(dots.mean())), "of_full_scan": round(float(dots.mean()) / len(cents), 3),
                     "radius_mean": round(float(radius.mean()), 3)})
        print(rows[-1], flush=True)
    write_result("assign_pruning", {"index": str(args.index), "centroids": int(len(cents)), "vectors": int(len(x)),
                                    "best_score_mean": round(float(best.mean()), 3), "two_level_bound": rows}, args.out)


if __name__ == "__main__":
    main()
