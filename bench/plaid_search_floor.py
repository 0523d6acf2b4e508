"""PLAID search only (queries pre-encoded), one query at a time on 1 thread: p50 at k=10 and k=100, this
checkout against another one (``--baseline``: a folder holding an ``embedctl`` package, e.g. a
``git archive`` of an earlier commit with its built .so files), interleaved, with the rankings compared.
``--threads 1,2``: this checkout also with each query split across 2 threads (search.query_threads; the
baseline always on one), as tree ``this_t2``.

    python bench/plaid_search_floor.py --index bench/work/serve/indexes/plaid [--baseline /tmp/base] \\
        [--queries 300] [--rounds 3] [--threads 1,2] [--precision fp32] [--out FILE]

The SciFact test queries are encoded once here (the index's own encoder), then each round runs one child
process per tree (``PYTHONPATH`` = that tree), alternating, so both trees see the same host load. A child
opens the index with the default backend (at --precision), warms up, times ``PlaidSearcher.search(Q, k)`` for every query
at k=10 and k=100 (wall clock, and the thread's CPU time, which leaves out a loaded host's scheduling waits)
and returns its times and rankings. Reported: p50/p95 per tree over all rounds, the p50 ratios, and whether the rankings agree (same pids in the same order, largest score difference).
Writes --out (default bench/results/<machine-kind>/plaid_search_floor.json; every run also under
bench/work/runs/). Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
KS = (10, 100)


def child(index: str, queries_file: str, out_file: str, repeats: int, threads: int, precision: str = "auto") -> None:
    """In a child whose PYTHONPATH is one tree: time every query at each k; rankings and times -> out_file."""
    import torch

    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    from embedctl.index.generations import open_generation
    from embedctl.search.plaid import PlaidSearcher

    searcher = PlaidSearcher(open_generation(Path(index)), precision=precision)
    if threads > 1:  # each query split across threads (a tree without query_threads is only run on one)
        searcher.query_threads = threads
    queries = np.load(queries_file)
    result: dict = {"backend": searcher.backend.describe(), "embedctl": str(Path(sys.modules["embedctl"].__file__).parent),
                    "query_threads": threads}
    arrays = {}
    for k in KS:
        for Q in queries[:20]:  # warm up: page the memory maps in, build scratch buffers
            searcher.search(Q, k)
        times = np.empty((repeats, len(queries)))
        cpu = np.empty((repeats, len(queries)))
        for r in range(repeats):
            for i, Q in enumerate(queries):
                c0, t0 = time.thread_time(), time.perf_counter()
                searcher.search(Q, k)
                times[r, i], cpu[r, i] = time.perf_counter() - t0, time.thread_time() - c0
        ranked = [searcher.search(Q, k) for Q in queries]
        arrays[f"pids{k}"] = np.stack([np.pad(p, (0, k - len(p)), constant_values=-1) for p, _ in ranked])
        arrays[f"scores{k}"] = np.stack([np.pad(s, (0, k - len(s)), constant_values=np.nan) for _, s in ranked])
        arrays[f"times{k}"] = times.min(axis=0)  # per query: the best of the repeats (noise is one-sided)
        arrays[f"cpu{k}"] = cpu.min(axis=0)  # this thread's CPU time: what a loaded host's waits leave out
    np.savez(out_file, **arrays)
    Path(out_file + ".json").write_text(json.dumps(result))


def ranking_changes(this: np.ndarray, base: np.ndarray) -> dict:
    """How many queries' rankings differ from the baseline's, and of those how many hold the same documents (an
    order swapped between near-equal scores), and the smallest overlap of the top k."""
    differ = [i for i in range(len(base)) if not np.array_equal(this[i], base[i])]
    overlaps = [len(set(this[i]) & set(base[i])) / base.shape[1] for i in differ]
    return {"queries_ranked_otherwise": len(differ),
            "of_which_same_documents": sum(1 for o in overlaps if o == 1.0),
            "min_overlap": min(overlaps, default=1.0)}


def encode_queries(index: str, n: int) -> np.ndarray:
    """The first n SciFact test queries, encoded by the index's encoder (cached under bench/work/)."""
    cache = BENCH / "work" / "plaid_search_floor" / f"queries_{n}_{Path(index).resolve().as_posix().replace('/', '_')}.npy"
    if cache.is_file():
        return np.load(cache)
    sys.path.insert(0, str(REPO))
    from benchdata import find_scifact, queries_of

    import embedctl

    _, texts, _ = queries_of(find_scifact(), "test")
    texts = texts[:n]
    idx = embedctl.Index.open(index, overrides=["search.threads=1", "model.kind=colbert"])
    Q = np.stack([idx.encoder.encode_queries([t])[0] for t in texts]).astype(np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, Q)
    return Q


def stats(seconds: np.ndarray) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4), "p95_ms": round(float(np.percentile(ms, 95)), 4),
            "mean_ms": round(float(ms.mean()), 4), "n": int(ms.size)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", default=str(BENCH / "work" / "serve" / "indexes" / "plaid"))
    p.add_argument("--baseline", default=None, help="a folder holding the embedctl package to compare against")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3, help="child processes per tree, alternating")
    p.add_argument("--repeats", type=int, default=3, help="times each query is timed in a child (best kept)")
    p.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    p.add_argument("--threads", default="1", help="query threads of this checkout, e.g. 1,2 (baseline: 1)")
    p.add_argument("--precision", default="auto", help="search.precision of every tree (auto: this CPU's default;"
                   " fp32 on an AMX host runs the centroid scores a CPU without AMX runs)")
    p.add_argument("--child", nargs=4, metavar=("QUERIES", "OUT", "REPEATS", "THREADS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.index, args.child[0], args.child[1], int(args.child[2]), int(args.child[3]), args.precision)
        return
    sys.path.insert(0, str(BENCH))
    from resultfiles import write_result

    load_start = os.getloadavg()
    counts = [int(t) for t in str(args.threads).split(",")]
    trees = {"this" if t == 1 else f"this_t{t}": (str(REPO), t) for t in counts}
    trees |= {"baseline": (str(Path(args.baseline).resolve()), 1)} if args.baseline else {}
    with tempfile.TemporaryDirectory() as tmp:
        qfile = os.path.join(tmp, "queries.npy")
        np.save(qfile, encode_queries(args.index, args.queries))
        runs: dict[str, list] = {name: [] for name in trees}
        info: dict[str, dict] = {}
        for r in range(args.rounds):
            for name, (tree, threads) in (list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]):
                out = os.path.join(tmp, f"{name}{r}.npz")
                env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
                subprocess.run([sys.executable, __file__, "--index", args.index, "--precision", args.precision,
                                "--child", qfile, out, str(args.repeats), str(threads)], env=env, check=True)
                runs[name].append(dict(np.load(out)))
                info[name] = json.loads(Path(out + ".json").read_text())
                print(f"round {r} {name}: " + ", ".join(
                    f"k={k} p50 {np.median(runs[name][-1][f'times{k}']) * 1000:.3f} ms "
                    f"(cpu {np.median(runs[name][-1][f'cpu{k}']) * 1000:.3f})" for k in KS), flush=True)
    result: dict = {"index": args.index, "queries": args.queries, "threads": 1, "query_threads": counts,
                    "precision": args.precision,
                    "note": "cpu: the calling thread's CPU time (with query threads > 1, not the helpers')",
                    "rounds": args.rounds,
                    "repeats": args.repeats, "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "trees": {}}
    for name in trees:
        result["trees"][name] = {**info[name], **{f"k{k}": stats(np.stack([run[f"times{k}"] for run in runs[name]]))
                                                  for k in KS}, **{f"k{k}_cpu": stats(np.stack([
                                                      run[f"cpu{k}"] for run in runs[name]])) for k in KS}}
    if "baseline" in trees:
        base = runs["baseline"][0]
        for name in (n for n in trees if n != "baseline"):
            this = runs[name][0]
            key = "vs_baseline" if name == "this" else f"{name}_vs_baseline"
            result[key] = {f"k{k}": {
                "p50_ratio": round(result["trees"][name][f"k{k}"]["p50_ms"] /
                                   result["trees"]["baseline"][f"k{k}"]["p50_ms"], 3),
                "cpu_p50_ratio": round(result["trees"][name][f"k{k}_cpu"]["p50_ms"] /
                                       result["trees"]["baseline"][f"k{k}_cpu"]["p50_ms"], 3),
                "same_pids": bool(np.array_equal(this[f"pids{k}"], base[f"pids{k}"])),
                **ranking_changes(this[f"pids{k}"], base[f"pids{k}"]),
                "max_score_diff": float(np.nanmax(np.abs(this[f"scores{k}"] - base[f"scores{k}"])))} for k in KS}
    print(json.dumps({k: v for k, v in result.items() if k == "trees" or "vs_baseline" in k}, indent=1))
    write_result("plaid_search_floor", result, args.out)


if __name__ == "__main__":
    main()
