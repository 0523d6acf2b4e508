"""PLAID build on SciFact, this checkout against another one (``--baseline``: a folder holding an ``embedctl``
package and its bench/, e.g. a ``git archive`` of an earlier commit with its built .so files), interleaved:
encode time, every other stage, and the rest of the build over encode (issue 36's target: < 10%).

    python bench/plaid_build_rest.py [--baseline /tmp/base] [--rounds 2] [--limit N] [--device cuda] [--threads N]
        [--out FILE]

Each round builds the same collection once per tree (``<tree>/bench/plaid_build.py build``, a child process,
the trees alternating so both see the same host load) into a temporary folder, with the default settings
(``auto`` backend and precision on this CPU, or the torch backend with ``--device cuda``; run it under
``taskset`` to build on fewer of the host's cores). Reported per tree: each run's timings, the median rest / encode,
the backend each chose, and whether the two trees wrote the same bytes (centroids, codes, residuals, norms,
IVF) in the first round. Writes --out (default bench/results/<machine-kind>/plaid_build_rest.json; every run
also under bench/work/runs/). Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
COMPARED = ("centroids.npy", "0.codes.npy", "0.residuals.npy", "0.norms.npy", "ivf.npy", "ivf_lengths.npy")


def build(tree: str, collection: str, out: str, limit: int | None, device: str = "cpu",
          threads: int | None = None) -> dict:
    cmd = [sys.executable, str(Path(tree) / "bench" / "plaid_build.py"), "build", "--collection", collection,
           "--out", out, "--no-progress"] + (["--device", device] if device != "cpu" else []) + \
        (["--limit", str(limit)] if limit else []) + (["--threads", str(threads)] if threads else [])
    path = os.pathsep.join([tree] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    done = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=path), check=True, capture_output=True, text=True)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    t = summary["timings"]
    rest = t["total_s"] - t["encode_s"]
    return {"timings": t, "rest_s": round(rest, 3), "rest_over_encode": round(rest / t["encode_s"], 4),
            "backend": summary["backend"], "num_embeddings": summary["num_embeddings"],
            "num_partitions": summary["num_partitions"], "peak_rss_mb": summary["peak_rss_mb"]}


def same_bytes(a: Path, b: Path) -> dict:
    return {name: bool(np.array_equal(np.load(a / "plaid" / name), np.load(b / "plaid" / name))) for name in COMPARED}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collection", default=str(REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"))
    p.add_argument("--baseline", default=None, help="a folder holding the embedctl package to compare against")
    p.add_argument("--rounds", type=int, default=2, help="builds per tree, alternating")
    p.add_argument("--limit", type=int, default=None, help="only the first N documents (smoke test)")
    p.add_argument("--device", default="cpu", help="where the encoder and the backend run (cuda: a GPU)")
    p.add_argument("--threads", type=int, default=None, help="torch threads of each build (default: torch's)")
    p.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = p.parse_args()
    sys.path.insert(0, str(BENCH))
    from resultfiles import write_result

    load_start = os.getloadavg()
    trees = {"this": str(REPO)} | ({"baseline": str(Path(args.baseline).resolve())} if args.baseline else {})
    runs: dict[str, list] = {name: [] for name in trees}
    result: dict = {"collection": args.collection, "limit": args.limit, "rounds": args.rounds, "device": args.device,
                    "threads": args.threads, "cpus": len(os.sched_getaffinity(0))}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, tree in (list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]):
                out = Path(tmp) / f"{name}{r}"
                runs[name].append(build(tree, args.collection, str(out), args.limit, args.device, args.threads))
                last = runs[name][-1]
                print(f"round {r} {name}: encode {last['timings']['encode_s']:.1f} s, rest {last['rest_s']:.2f} s "
                      f"({100 * last['rest_over_encode']:.1f}%), {last['backend']}", flush=True)
        if "baseline" in trees:
            result["same_bytes_round0"] = same_bytes(Path(tmp) / "this0", Path(tmp) / "baseline0")
    result["loadavg_start"], result["loadavg_end"] = load_start, os.getloadavg()
    result["trees"] = {name: {"runs": runs[name], "rest_over_encode_median": float(np.median(
        [run["rest_over_encode"] for run in runs[name]]))} for name in trees}
    print(json.dumps({k: v for k, v in result.items() if k != "trees"} | {
        name: tree["rest_over_encode_median"] for name, tree in result["trees"].items()}, indent=1))
    write_result("plaid_build_rest", result, args.out)


if __name__ == "__main__":
    main()
