"""PLAID quality across index seeds: how much nDCG@10 moves with the sample and k-means initialisation.

    python bench/plaid_seeds.py --model W/peers-work/minilm-colbert-ai --seeds 0,1,2 --work runs/seeds

Builds one index per seed (skipped when `--work/s{seed}` is complete), then searches the 300 SciFact test
queries at k=10 and k=100 with search.precision fp32 and bf16 (bf16 only where the CPU has the units), and
writes --out (default bench/results/<machine-kind>/plaid_seeds.json; every run also under bench/work/runs/).
Query encoding as bench_plaid.py (no attention to [MASK] padding).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_plaid as B  # noqa: E402
from machine import has_bf16_matrix_units  # noqa: E402
from resultfiles import write_result  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--work", default=str(B.REPO / "bench" / "work" / "seeds"), help="one index per seed (kept)")
    p.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder
    from embedctl.search.plaid import PlaidSearcher

    sf = B.find_scifact()
    qids, texts, qrels = B.load_queries(sf, 300)
    pids = B.doc_ids(sf, None)
    enc = load_encoder(ModelConfig(name_or_path=args.model, kind="colbert", doc_max_length=180,
                                   attend_to_mask_tokens=False), device="cpu")
    Qs = [enc.encode_queries([t])[0] for t in texts]
    precisions = ["fp32", "bf16"] if has_bf16_matrix_units() else ["fp32"]
    result: dict = {"model": args.model, "queries": len(qids), "runs": {}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        index = Path(args.work) / f"s{seed}"
        if not (index / "embedctl_index.json").is_file():
            cmd = [sys.executable, str(B.REPO / "bench" / "plaid_build.py"), "build", "--collection", str(sf / "corpus.jsonl"),
                   "--out", str(index), "--model", args.model, "--no-progress", "--seed", str(seed)]
            subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(B.REPO)})
        row = {}
        for prec in precisions:
            searcher = PlaidSearcher(index, precision=prec)
            for k in (10, 100):
                run = {}
                for qid, Q in zip(qids, Qs, strict=True):
                    found, scores = searcher.search(Q, k)
                    run[qid] = {pids[int(i)]: float(x) for i, x in zip(found, scores, strict=True)}
                row[f"{prec}_k{k}"] = B.evaluate(run, qrels)
        result["runs"][f"seed{seed}"] = row
        print(seed, json.dumps(row), flush=True)
    for key in next(iter(result["runs"].values())):
        vals = [r[key]["nDCG@10"] for r in result["runs"].values()]
        result.setdefault("mean_nDCG@10", {})[key] = round(float(np.mean(vals)), 4)
    print(json.dumps(result["mean_nDCG@10"]))
    write_result("plaid_seeds", result, args.out)


if __name__ == "__main__":
    main()
