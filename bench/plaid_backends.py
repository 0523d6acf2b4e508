"""Every PLAID backend that runs on this machine, computation by computation, against the reference.

    python bench/plaid_backends.py [--vectors 200000] [--centroids 8192] [--queries 50] [--threads 2] [--out FILE]

Synthetic ColBERT-like vectors (unit vectors scattered around unit centres, dim 128, SciFact's shape: 8192
centroids, nbits 2, ~157 vectors per document), so no model is needed. For each backend
(embedctl/index/plaid/backends.py: the reference, and the native one at each precision this CPU runs), the
median time of: nearest-centroid assignment, one k-means step, the next one (centroids moved to the first's
means) without and with the first step's assignment as hints (as k-means runs), compression, the stored norms,
and per query (one thread, after warm-up) each token's 64 best centroids (row_top), the centroid interaction (segment
max-sum over 1024 candidates; doc_maxsum: the same with the codes read in place), the scatter max of the
pruned stage and the final MaxSim of 256 candidates (maxsim_docs: the rows read in place); with the speed-up over the reference and
whether the answer matched it (exactly, or the largest difference). A fast path that does not beat the
reference here has not earned its place. Writes bench/results/<machine-kind>/plaid_backends.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resultfiles import write_result  # noqa: E402

from embedctl.index.plaid.backends import available_backends  # noqa: E402
from embedctl.index.plaid.codec import train_codec  # noqa: E402
from embedctl.index.plaid.reference import Backend  # noqa: E402


def clustered(n: int, centres: np.ndarray, rng) -> np.ndarray:
    x = centres[rng.integers(0, len(centres), n)] + 0.08 * rng.normal(size=(n, centres.shape[1])).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def compare(got, want) -> dict:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind in "iu":
        return {"same": bool(np.array_equal(got, want)), "differ_fraction": float(np.mean(got != want))}
    finite = np.isfinite(want)
    return {"same": bool(np.array_equal(got, want)),
            "max_abs_diff": float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))}


def search_call(name: str, backend, tables, Q, ST, codes, packed, norms, lens):
    """One query's call of a search stage on the candidates' vectors (``lens`` vectors per candidate)."""
    if name == "segment_maxsum":  # full centroid interaction over every candidate
        return lambda: backend.segment_maxsum(ST, codes, lens)
    if name == "scatter_max_rows":  # the pruned stage's maxima, one slot per candidate
        slots = np.repeat(np.arange(len(lens)), lens)
        return lambda: backend.scatter_max_rows(ST, codes, slots, len(lens))
    if name == "row_top":  # each query token's 64 best centroids (the adaptive budget and stage 2)
        return lambda: backend.row_top(ST, 64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    if name == "doc_maxsum":  # segment_maxsum with the codes read in place (CSR), as search calls it
        doc_codes = np.ascontiguousarray(codes, np.int32)
        return lambda: backend.doc_maxsum(ST, doc_codes, offsets, np.arange(len(lens)))
    m = 256  # the final MaxSim ranks ndocs / 4 candidates at k=10
    if name == "maxsim_docs":  # maxsim with the rows read in place, as search calls it
        return lambda: backend.maxsim_docs(tables, Q, ST, codes, packed, norms, offsets, np.arange(min(m, len(lens))))
    n = int(lens[:m].sum())
    return lambda: backend.maxsim(tables, Q, ST, codes[:n], packed[:n], norms[:n], lens[:m])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vectors", type=int, default=200_000)
    p.add_argument("--centroids", type=int, default=8192)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2,
                   help="torch threads of the indexing rows (search rows always run on one)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import torch

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(args.centroids, args.dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = clustered(args.vectors, centres, rng)
    reference = Backend()
    codec = train_codec(centres.astype(np.float16), x[:20_000], 2, backend=reference)
    cf = codec.centroids_f32()
    codes = reference.nearest(x, cf)[0]
    packed = reference.compress(x, cf, codes, codec.bucket_cutoffs, 2)
    norms = codec.norms(codes, packed, reference)
    # a k-means step's next iteration: the centroids moved to the means of the first step's clusters (empty ones
    # stay), each row hinted with its first assignment (k-means' previous one), as kmeans.train_centroids does
    first, _, sums = reference.kmeans_step(x[:50_000], cf)
    counts = np.bincount(first, minlength=len(cf))[:, None]
    moved = np.where(counts > 0, sums / np.maximum(counts, 1), cf).astype(np.float32)
    doclen = 157
    queries = [clustered(32, centres, rng) for _ in range(args.queries)]
    cand_docs = min(1024, args.vectors // (2 * doclen))

    results: dict = {}
    want: dict = {}
    index_keys = {f"{b.name}-{b.precision}" for b in available_backends("index")}
    search_only = [b for b in available_backends("search") if f"{b.name}-{b.precision}" not in index_keys]
    for backend in available_backends("index") + search_only:
        key = f"{backend.name}-{backend.precision}"
        row: dict = {}
        torch.set_num_threads(args.threads)
        work = {
            "nearest": lambda b=backend: b.nearest(x, cf)[0],
            "kmeans_step": lambda b=backend: b.kmeans_step(x[:50_000], cf)[0],
            "kmeans_step_next": lambda b=backend: b.kmeans_step(x[:50_000], moved)[0],
            "kmeans_step_next_hinted": lambda b=backend: b.kmeans_step(x[:50_000], moved, hints=first)[0],
            "compress": lambda b=backend: b.compress(x, cf, codes, codec.bucket_cutoffs, 2),
            "norms": lambda b=backend: b.decoded_norms(cf, codes, packed, codec.bucket_weights, 2),
        }
        if key not in index_keys:  # a search-only precision here (bf16 MaxSim without AMX): no indexing rows
            work = {}
        for name, fn in work.items():
            seconds, out = timed(fn, args.repeats if name != "nearest" or backend.name != "reference" else 1)
            row[name] = {"s": round(seconds, 4)}
            if key.startswith("reference") and name != "kmeans_step_next_hinted":
                want[name] = out
            else:  # hinted: against the reference's unhinted answers
                row[name].update(compare(out, want[name.removesuffix("_hinted")]))
        torch.set_num_threads(1)
        tables = backend.search_tables(cf, codec.bucket_weights, 2)
        lens = np.full(cand_docs, doclen, np.int64)
        for name in ("row_top", "segment_maxsum", "doc_maxsum", "scatter_max_rows", "maxsim", "maxsim_docs"):
            per_query, outs = [], []
            for qi, Q in enumerate(queries):
                ST = Q @ cf.T
                sel = np.random.default_rng(qi).integers(0, args.vectors - doclen * cand_docs)
                span = slice(sel, sel + doclen * cand_docs)
                fn = search_call(name, backend, tables, Q, ST, codes[span], packed[span], norms[span], lens)
                seconds, out = timed(fn, 3)
                per_query.append(seconds)
                outs.append(out)
            row[name] = {"ms_per_query": round(1000 * statistics.median(per_query), 3)}
            if key.startswith("reference"):
                want[name] = outs
            else:
                row[name].update(compare(np.concatenate([np.ravel(o) for o in outs]),
                                         np.concatenate([np.ravel(o) for o in want[name]])))
        results[key] = row
        print(key, row, flush=True)
    ref = results["reference-exact"]
    for row in results.values():
        for name, figures in row.items():
            base = ref.get(name, {})
            unit = "s" if "s" in figures else "ms_per_query"
            if unit in base and figures[unit] > 0:
                figures["speedup_vs_reference"] = round(base[unit] / figures[unit], 2)
    write_result("plaid_backends", {
        "settings": {"vectors": args.vectors, "centroids": args.centroids, "dim": args.dim, "nbits": 2,
                     "queries": args.queries, "candidates": cand_docs, "doclen": doclen,
                     "threads": f"{args.threads} for indexing rows, 1 for search rows"},
        "backends": results}, args.out)


if __name__ == "__main__":
    main()
