"""Raw bench runs (bench/work/runs/, git-ignored) -> the latest result files in bench/results/ (in git).

    python bench/promote.py list [--kind KIND] [--bench NAME]       # the raw runs, newest last
    python bench/promote.py promote NAME [RUN] [--kind KIND]        # RUN (default: the newest raw run of NAME)
                                                                    # becomes bench/results/KIND/NAME.json
    python bench/promote.py index-runs RUN RUN ... [--out FILE]     # several bench_plaid.py runs of one session
                                                                    # summed up -> plaid_index_runs.json

Every bench script already writes its latest file (unless given another --out); `promote` is for choosing
another run as the latest (say the one measured at nominal machine speed, not the one under host load), and
`index-runs` sums up repeated PLAID index runs, with the query-encoding p50 of each as the gauge of how
loaded the host was. Then `python bench/summarize.py` updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from machine import machine_kind
from resultfiles import RAW, REPO, dump, latest_path, write_result

from embedctl.util import atomic


def raw_runs(kind: str | None = None, bench: str | None = None) -> list[Path]:
    """Raw run files, oldest first (their names are UTC stamps)."""
    pattern = f"{kind or '*'}/{bench or '*'}/*.json"
    return sorted(RAW.glob(pattern), key=lambda p: (p.parent, p.name))


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def cmd_list(args: argparse.Namespace) -> int:
    runs = raw_runs(args.kind, args.bench)
    for path in runs:
        prov = read(path).get("provenance", {})
        print(f"{shown(path)}  commit {str(prov.get('git_commit'))[:10]}{'+' if prov.get('git_dirty') else ''}  "
              f"{prov.get('command', '')}")
    if not runs:
        print(f"no raw runs under {shown(RAW)}", file=sys.stderr)
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    kind = args.kind or machine_kind()
    if args.run:
        run = Path(args.run)
    else:
        candidates = raw_runs(kind, args.name)
        if not candidates:
            sys.exit(f"no raw run of {args.name} for {kind} under {shown(RAW)}: run the benchmark, or pass --kind")
        run = candidates[-1]
    result = read(run)
    prov = result.get("provenance", {})
    if prov.get("benchmark") not in (None, args.name) or prov.get("machine_kind") not in (None, kind):
        sys.exit(f"{run} is a {prov.get('benchmark')} run on {prov.get('machine_kind')}, not {args.name} on {kind}")
    prov["promoted"] = {"from": shown(run), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    target = latest_path(args.name, kind)
    atomic.write_text(target, dump({"provenance": prov, **result}))
    print(f"{shown(run)} -> {shown(target)}")
    return 0


def index_run_row(path: Path) -> dict:
    result = read(path)
    index, prov = result["index"], result.get("provenance", {})
    phases = {k: v for k, v in index.get("phases_s", {}).items() if k not in ("encode_s", "total_s")}
    encode_p50 = result.get("search", {}).get("runs", {}).get("threads1_query_encode", {}).get("p50_ms")
    return {"file": shown(path), "git_commit": prov.get("git_commit"), "date": prov.get("date"),
            "query_encode_p50_ms (the gauge of host load)": encode_p50, "encode_s": index["encode_s"],
            **phases, "rest_s": index["rest_s"], "rest_over_encode": index["rest_over_encode"],
            "wall_s": index["wall_s"], "peak_rss_mb": index.get("peak_rss_mb")}


def cmd_index_runs(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.runs]
    runs = [index_run_row(p) for p in paths]
    found = {read(p).get("provenance", {}).get("machine_kind") for p in paths} - {None}
    if len(found) > 1:
        sys.exit(f"the runs come from several machine kinds ({', '.join(sorted(found))}): sum up one at a time")
    ratios = [r["rest_over_encode"] for r in runs]
    gauge = [r["query_encode_p50_ms (the gauge of host load)"] for r in runs]
    quietest = min(range(len(runs)), key=lambda i: gauge[i] if gauge[i] is not None else float("inf"))
    result = {"what": "bench_plaid.py index time split, several runs in one session", "runs": runs,
              "rest_over_encode": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
              "quietest_run": runs[quietest]["file"],
              "note": "host load slows the assignment phases more than encoding; the quietest run (lowest query-"
                      "encoding p50) is the one to read the split from"}
    write_result("plaid_index_runs", result, args.out, kind=found.pop() if found else None)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="the raw runs")
    p.add_argument("--kind")
    p.add_argument("--bench")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("promote", help="a raw run becomes the latest result")
    p.add_argument("name", help="benchmark: plaid, dense, peers, ...")
    p.add_argument("run", nargs="?", help="raw run file (default: the newest of NAME for KIND)")
    p.add_argument("--kind", help="machine kind (default: this machine's)")
    p.set_defaults(func=cmd_promote)
    p = sub.add_parser("index-runs", help="sum up several bench_plaid.py runs")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--out", help="result file (default: the latest plaid_index_runs of the runs' machine kind)")
    p.set_defaults(func=cmd_index_runs)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
