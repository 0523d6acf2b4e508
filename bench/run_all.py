"""`make bench`: every benchmark in one run, peers side by side, then the plots.

    python bench/run_all.py [--scifact DIR] [--only dense,plaid,...] [--quick] [--peers-work DIR]

Runs, in order (each a script in bench/ writing bench/results/<machine-kind>/<name>.json, the latest for
this machine kind, and its raw run under bench/work/runs/; run one alone for details):
  pretokenize  tokens/s of `embedctl pretokenize` vs raw `tokenizers` batch encoding
  dense        dense index + search with the embedded model (nDCG@10 target 0.645), timings
  peers        colbert-ai / PyLate / sentence-transformers through ../shared/peers (skipped with a note when
               their venvs are missing: ../shared/peers/setup.sh DIR)
  plaid        PLAID index and search (the peers' shared ColBERT model when built, else minilm + projection)
  train        fine-tuning vs sentence-transformers MNRL (quality and pairs/s)
  train_speed  training speed alone: 3 alternating runs of embedctl and sentence-transformers
then bench/plots.py and bench/summarize.py (bench/RESULTS.md). Benchmarks want a quiet machine: nothing else
running. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ORDER = ("pretokenize", "dense", "peers", "plaid", "train", "train_speed")


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    peers_model = args.peers_work / "peers-work" / "minilm-colbert-ai"
    plaid = ["--model", str(peers_model)] if (peers_model / "config.json").exists() else []
    quick = ["--steps", "50", "--batch", "16", "--lr", "1e-4", "--max-length", "128", "--eval-max-length", "256"]
    train = quick if args.quick else []
    return {
        "pretokenize": ["bench_pretokenize.py"],
        "dense": ["bench_dense.py"],
        "peers": ["bench_peers.py", "--work", str(args.peers_work), "--steps", "model,data,colbertai,pylate,dense"],
        "plaid": ["bench_plaid.py", *plaid],
        "train": ["bench_train.py", *train, *(["--negatives", "2"] if args.quick else [])],
        "train_speed": ["bench_train.py", *train, "--speed-only", "3"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", help="BEIR SciFact folder (default ../shared/data/scifact)")
    parser.add_argument("--only", default=",".join(ORDER))
    parser.add_argument("--quick", action="store_true", help="the training benchmark at the reported settings (50 steps x 16 queries, lr 1e-4, 128 tokens, "
                        "2 mined negatives) instead of 100 x 32 x 256")
    parser.add_argument("--peers-work", type=Path,
                        default=Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers")))
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if args.scifact:
        env["EMBEDCTL_SCIFACT"] = str(Path(args.scifact).resolve())
    failed = []
    cmds = commands(args)
    for name in ORDER:
        if name not in args.only.split(","):
            continue
        t0 = time.perf_counter()
        print(f"== bench {name}", flush=True)
        script, *script_args = cmds[name]
        rc = subprocess.run([sys.executable, str(BENCH / script), *script_args], env=env).returncode
        print(f"== bench {name}: rc={rc} in {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    for tail in ("plots.py", "summarize.py"):  # also after a failure: the other results still changed
        subprocess.run([sys.executable, str(BENCH / tail)], env=env, check=False)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
