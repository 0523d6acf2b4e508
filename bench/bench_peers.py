"""Run the peer systems (colbert-ai, PyLate/fast-plaid, sentence-transformers dense) on SciFact with the
shared ColBERT model, using the kit in ../shared/peers, and collect their figures in --out (default
bench/results/<machine-kind>/peers.json; every run also under bench/work/runs/).

    python bench/bench_peers.py [--work DIR] [--steps model,data,colbertai,pylate,dense]
    python bench/bench_peers.py --steps colbertai_search   # colbert-ai search again on its existing index

The kit builds each peer in its own venv (`../shared/peers/setup.sh DIR`, several GB, minutes); when the
venvs are missing the peer is skipped with a note in the JSON, never faked. The shared model folder
(DIR/peers-work/minilm-colbert-ai, Stanford layout) is what bench_plaid.py loads for a fair comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
KIT = REPO.parent / "shared" / "peers"
DEFAULT_WORK = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers"))


def venv_python(work: Path, name: str) -> Path | None:
    python = work / "peers-work" / f"venv-{name}" / "bin" / "python"
    return python if python.exists() else None


def run_step(work: Path, python: Path, script: str, *, timed: bool = False, env: dict | None = None) -> dict:
    """Run one kit script from WORK; returns wall time, exit code and (with timed) peak RSS."""
    cmd = [str(python), str(KIT / script)]
    if timed:
        cmd = ["/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    out = {"script": script, "returncode": proc.returncode, "wall_s": round(time.perf_counter() - t0, 2)}
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if match:
        out["peak_rss_mb"] = round(int(match.group(1)) / 1024, 1)
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
    print(f"[peers] {script}: rc={proc.returncode} {out['wall_s']} s", flush=True)
    return out


def read_result(work: Path, name: str) -> dict | None:
    path = work / "peers-work" / "results" / name
    return json.loads(path.read_text()) if path.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="folder given to ../shared/peers/setup.sh")
    parser.add_argument("--steps", default="model,data,colbertai,pylate,dense")
    parser.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = parser.parse_args()
    steps = set(args.steps.split(","))
    work: Path = args.work
    report: dict = {"work": str(work), "kit": str(KIT), "steps": {}, "notes": []}
    colbert, pylate, fastplaid = (venv_python(work, n) for n in ("colbert", "pylate", "fastplaid"))
    if not KIT.exists():
        report["notes"].append(f"peer kit not found at {KIT}: all peers skipped")
    if colbert is None or pylate is None:
        report["notes"].append(f"peer venvs missing under {work}/peers-work: run {KIT}/setup.sh {work} first")
    else:
        if "model" in steps:
            report["steps"]["build_model"] = run_step(work, pylate, "build_model.py")
            report["steps"]["convert"] = run_step(work, colbert, "convert_to_colbert_ai.py")
        if "data" in steps:
            report["steps"]["prep_data"] = run_step(work, colbert, "prep_data.py")
        if "colbertai" in steps:
            report["steps"]["colbertai_index"] = run_step(work, colbert, "colbertai_index.py", timed=True)
        if "colbertai" in steps or "colbertai_search" in steps:  # colbertai_search alone: reuse its index
            report["steps"]["colbertai_search"] = run_step(work, colbert, "colbertai_search.py", timed=True)
        if "dense" in steps:
            report["steps"]["dense_baseline"] = run_step(work, pylate, "dense_baseline.py")
        if "pylate" in steps:
            if fastplaid is None:
                report["notes"].append("PyLate/fast-plaid skipped: venv-fastplaid missing (setup.sh without SKIP_FASTPLAID=1; ~3.7 GB)")
            else:
                report["steps"]["pylate_encode"] = run_step(work, fastplaid, "pylate_encode.py", timed=True)
                report["steps"]["pylate_plaid"] = run_step(work, fastplaid, "pylate_bench.py", timed=True)
    for name in ("colbertai_index.json", "colbertai_search.json", "dense_minilm.json",
                 "pylate_plaid_nbits4.json", "pylate_plaid_nbits4_build.json"):
        result = read_result(work, name)
        if result is not None:
            report.setdefault("results", {})[name.removesuffix(".json")] = result
    report["shared_model"] = str(work / "peers-work" / "minilm-colbert-ai")
    write_result("peers", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
