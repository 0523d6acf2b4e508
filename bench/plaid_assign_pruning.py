"""Can exact nearest-centroid assignment skip centroids? A two-level bound measured on a real PLAID index.

    python bench/plaid_assign_pruning.py --index bench/work/colbert/indexes/colbert-infonce [--vectors 20000]

Compression assigns every vector to its nearest centroid: vectors x centroids dot products, and with the
default centroid count (16 sqrt(vectors), rounded down to a power of 2) that grows as vectors^1.5. An exact
sub-linear assignment would group the centroids (k-means over them, G groups with centre g and radius R_g)
and skip every group whose bound x.g + R_g (|x| = 1) is below the best score found, rescoring the rest.
This script measures how much such a search would skip on the index's own centroids and (decompressed)
vectors: the fraction of groups that survive the bound and the centroid dot products per vector
(G + the surviving groups' centroids) against the full scan.

``--drift``: the other exact shortcut, for k-means (4 of its 5 nearest-centroid passes over the sample happen
after the first): keep each row's m best centroids from the last iteration and the (m+1)-th score, score
exactly every centroid that moved more than tau (the "movers") and the m candidates; a row whose best of those
beats the (m+1)-th old score plus |x| tau (+ the largest change of a non-mover's |c|^2 / 2) keeps an exact
answer without the full scan, the others need it. Runs embedctl's k-means (4 iterations, 32 points a centroid,
the native backend) on the index's decompressed vectors and reports, per iteration, the centroids' drift, the
rows proven and the dot products still needed (movers + unproven rows' full scans + m candidates).
Writes bench/results/<kind>/assign_pruning.json.
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
    p.add_argument("--drift", action="store_true", help="also the drift bound over k-means iterations")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import faiss

    drift = kmeans_drift(args.index) if args.drift else None
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
    result = {"index": str(args.index), "centroids": int(len(cents)), "vectors": int(len(x)),
              "best_score_mean": round(float(best.mean()), 3), "two_level_bound": rows}
    write_result("assign_pruning", {**result, **({"kmeans_drift_bound": drift} if drift else {})}, args.out)


def kmeans_drift(index: Path, points_per_centroid: int = 32, niters: int = 4, rows: int = 2000) -> dict:
    """The --drift measurement (module docstring): k-means as kmeans.train_centroids runs it, keeping each
    iteration's centroids; then, on ``rows`` of its points in float64, each later iteration's bound."""
    from embedctl.index.plaid import kmeans
    from embedctl.index.plaid.reference import squared_norms
    from embedctl.index.plaid_indexer import index_backend

    k = int(np.load(index / "plaid" / "centroids.npy", mmap_mode="r").shape[0])
    _, x = index_vectors(index, points_per_centroid * k)
    backend = index_backend("cpu", "auto", "auto")
    rs = np.random.RandomState(0)
    cent, sq, codes = x[rs.choice(len(x), size=k, replace=False)], squared_norms(x), None
    history = [cent.copy()]
    for _ in range(niters):
        codes, _, sums = backend.kmeans_step(x, cent, sq, codes)
        counts = np.bincount(codes, minlength=k)
        cent = sums / np.maximum(counts, 1).astype(np.float32)[:, None]
        kmeans.split_empty_clusters(counts, cent, rs)
        history.append(cent.copy())
    xs = x[np.random.default_rng(5).choice(len(x), min(rows, len(x)), replace=False)].astype(np.float64)
    norms, at = np.linalg.norm(xs, axis=1), np.arange(len(xs))[:, None]

    def scores(c):  # argmax <x, c> - |c|^2 / 2 is the L2 nearest centroid
        return xs @ c.T - 0.5 * (c * c).sum(axis=1)[None, :]

    out = []
    for t in range(1, niters):  # the assignment of iteration t + 1 (history[t]), the one before on history[t - 1]
        old_c, new_c = history[t - 1].astype(np.float64), history[t].astype(np.float64)
        old, new = scores(old_c), scores(new_c)
        moved = np.linalg.norm(new_c - old_c, axis=1)
        half_sq = np.abs(0.5 * ((new_c ** 2).sum(axis=1) - (old_c ** 2).sum(axis=1)))
        order = np.argsort(-old, axis=1)
        cases = []
        for m in (4, 16, 64):
            bound = old[at[:, 0], order[:, m]]  # the (m+1)-th best old score: every other centroid's, at most
            for tau in (0.05, 0.1, 0.2):
                movers = moved > tau
                slack = norms * tau + (half_sq[~movers].max() if (~movers).any() else 0.0)
                seen = np.concatenate([new[at, order[:, :m]], new[:, movers]], axis=1).max(axis=1)
                proven = float((seen >= bound + slack).mean())
                needed = movers.mean() + (1 - proven) * (1 - movers.mean()) + m / k
                cases.append({"candidates": m, "tau": tau, "movers": round(float(movers.mean()), 3),
                              "rows_proven": round(proven, 3), "of_full_scan": round(float(needed), 3)})
        out.append({"iteration": t + 1, "drift_median": round(float(np.median(moved)), 3),
                    "drift_p90": round(float(np.quantile(moved, 0.9)), 3), "drift_max": round(float(moved.max()), 3),
                    "best": min(cases, key=lambda c: c["of_full_scan"]), "cases": cases})
        print(out[-1]["iteration"], out[-1]["best"], flush=True)
    return {"centroids": k, "points": int(len(x)), "rows": int(len(xs)), "iterations": out}


if __name__ == "__main__":
    main()
