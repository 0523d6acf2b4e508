"""PLAID search latency, embedctl vs colbert-ai, from pairs of result files measured one after the other.

    python bench/compare_search.py PLAID_JSON:PEERS_JSON [PLAID_JSON:PEERS_JSON ...] [--out FILE]
    python bench/compare_search.py bench/work/runs/x86_64-avx2-2c/plaid/2026-11-23T014000Z.json:bench/work/runs/x86_64-avx2-2c/peers/2026-11-23T013000Z.json

Each pair is a bench_plaid.py result and a bench_peers.py result (colbertai_search step) taken back to
back on the same machine; on a shared machine the absolute figures drift from one window to the next,
so only ratios within a pair are compared. colbert-ai's retrieval time is its end-to-end median minus
its query-encoding median (its search API encodes inside). The pairs are raw runs (bench/work/runs/, see
`bench/promote.py list`); all must come from one machine kind. The rounds together are the result:
--out defaults to bench/results/<that machine kind>/search_vs_colbertai.json (raw copy under bench/work/runs/).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from resultfiles import write_result


def compare(plaid_file: str, peers_file: str) -> dict:
    plaid = json.loads(Path(plaid_file).read_text())
    ours = plaid["search"]
    theirs = json.loads(Path(peers_file).read_text())["results"]["colbertai_search"]["runs"]
    rows = {}
    for threads in (1, 2):
        enc_theirs = theirs[f"threads{threads}_query_encode"]["median_ms"]
        for k in (10, 100):
            o, t = ours["runs"][f"threads{threads}_k{k}"], theirs[f"threads{threads}_k{k}"]
            e2e_theirs = t["latency_end_to_end"]["median_ms"]
            retr_theirs = e2e_theirs - enc_theirs
            rows[f"threads{threads}_k{k}"] = {
                "embedctl": {"retrieval_p50_ms": o["retrieval"]["p50_ms"], "end_to_end_p50_ms": o["end_to_end"]["p50_ms"],
                             "nDCG@10": o["nDCG@10"]},
                "colbert_ai": {"retrieval_p50_ms": round(retr_theirs, 2), "end_to_end_p50_ms": e2e_theirs,
                               "nDCG@10": t.get("ndcg@10")},
                "ratio_retrieval": round(o["retrieval"]["p50_ms"] / retr_theirs, 3),
                "ratio_end_to_end": round(o["end_to_end"]["p50_ms"] / e2e_theirs, 3)}
    kind = plaid.get("provenance", {}).get("machine_kind")
    return {"files": [plaid_file, peers_file], "machine_kind": kind, "machine": plaid.get("machine"),
            "embedctl_precision": ours.get("precision"), "runs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", metavar="PLAID_JSON:PEERS_JSON")
    parser.add_argument("--out", type=Path, default=None,
                        help="result file (default: the latest search_vs_colbertai of the rounds' machine kind)")
    args = parser.parse_args()
    pairs = [arg.split(":", 1) for arg in args.pairs]
    if any(len(p) != 2 for p in pairs):
        parser.error("each pair is PLAID_JSON:PEERS_JSON")
    rounds = [compare(a, b) for a, b in pairs]
    for i, r in enumerate(rounds, 1):
        for name, row in r["runs"].items():
            print(f"round {i} {name}: retrieval {row['embedctl']['retrieval_p50_ms']} vs "
                  f"{row['colbert_ai']['retrieval_p50_ms']} ms ({row['ratio_retrieval']}x), end to end "
                  f"{row['embedctl']['end_to_end_p50_ms']} vs {row['colbert_ai']['end_to_end_p50_ms']} ms "
                  f"({row['ratio_end_to_end']}x)")
    found = {r["machine_kind"] for r in rounds} - {None}
    if len(found) > 1:
        parser.error(f"the rounds come from several machine kinds ({', '.join(sorted(found))}): compare one at a time")
    kind = found.pop() if found else None  # files from before provenance: this machine's kind
    write_result("search_vs_colbertai", {"rounds": rounds}, args.out, kind=kind)


if __name__ == "__main__":
    main()
