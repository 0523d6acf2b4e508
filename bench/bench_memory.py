"""The training memory plan against the real peak: estimate (embedctl.train.memory) vs RSS high-water.

    python bench/bench_memory.py [--work DIR] [--settings NAME,...] [--out FILE]

Builds once under ``--work`` (outside the repository; reused): a SciFact slice (the first 64 train queries,
their documents and 300 others), its token cache and batches with configs/minilm_scifact.yaml (32 queries
and 4 mined negatives per batch). Then per setting runs ``embedctl train`` for 2 steps (the second step holds
the activations and AdamW's moments together) as a child process, without evaluation, and reads

- the estimate: the "memory plan" line train prints before its first step (``~X GiB``);
- the real peak: the child's RSS high-water mark from the operating system (``os.wait4`` rusage; for
  torchrun, the largest rank's).

Settings vary the step (data.split_factor: 8 or 16 queries; the full 32 x 123 step needs ~13 GB, too much for
a shared 24 GB host), GradCache chunks and the engine (ddp, two ranks on one machine). Target: the estimate
within 20% of the real peak. Writes bench/results/<kind>/memory.json after each setting; a rerun with the
same --out skips the settings already there (--redo to measure them again).
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

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {  # a stored batch holds up to 32 queries x 123 documents of 256 tokens
    "single_q8": ["data.split_factor=4"],
    "single_q8_gradcache4": ["data.split_factor=4", "train.grad_cache.chunk_size=4"],
    "ddp2_q8": ["engine.name=ddp", "data.split_factor=4"],
    "single_q16": ["data.split_factor=2"],
}


def build_fixture(scifact: Path, work: Path) -> Path:
    batches = work / "batches"
    if (batches / "metadata.json").is_file():
        return batches
    beir = work / "slice"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    rows = [r.split("\t") for r in (scifact / "qrels" / "train.tsv").read_text().splitlines()[1:]]
    qids = list(dict.fromkeys(r[0] for r in rows))[:64]
    rows = [r for r in rows if r[0] in qids]
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    wanted = {r[1] for r in rows}
    docs = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if json.loads(line)["_id"] in wanted or len(docs) < 300:
                docs.append(line)
    (beir / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    (beir / "queries.jsonl").write_text("".join(line for line in open(scifact / "queries.jsonl", encoding="utf-8")
                                                if json.loads(line)["_id"] in qids), encoding="utf-8")
    cfg = str(REPO / "configs" / "minilm_scifact.yaml")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for argv in (["pretokenize", cfg, "--input", str(beir), "--output", str(work / "tokens")],
                 ["prebatch", cfg, "--input", str(work / "tokens"), "--qrels", str(beir / "qrels" / "train.tsv"),
                  "--output", str(batches), "--queries-per-batch", "32", "--negatives-per-query", "4"]):
        subprocess.run([sys.executable, "-m", "embedctl", *argv], check=True, env=env, cwd=work)
    return batches


def run_setting(name: str, overrides: list[str], batches: Path, work: Path) -> dict:
    out = work / "runs" / name
    common = [str(REPO / "configs" / "minilm_scifact.yaml"), f"data.path={batches}", f"output.dir={out}",
              "train.max_steps=2", "eval.path=null", "train.save_every=0", "output.overwrite=true",
              "train.resume=never", "data.shuffle=false", *overrides]
    if "engine.name=ddp" in overrides:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29533",
               "-m", "embedctl", "train", *common]
    else:
        cmd = [sys.executable, "-m", "embedctl", "train", *common]
    env = dict(os.environ, PYTHONPATH=str(REPO), EMBEDCTL_PROGRESS_EVERY_S="1000")
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    if child.returncode != 0:
        return {"setting": name, "overrides": overrides, "error": output[-2000:]}
    plan = next(line for line in output.splitlines() if line.startswith("memory plan"))
    estimate = float(re.search(r"estimated (?:step )?peak ~([\d.]+) GiB", plan).group(1))
    real = usage.ru_maxrss / 1024 ** 2  # KiB -> GiB
    return {"setting": name, "overrides": overrides, "plan": plan, "estimate_gib": estimate, "real_peak_gib": round(real, 3),
            "ratio": round(estimate / real, 3), "within_20pct": abs(estimate / real - 1) <= 0.2, "seconds": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(REPO.parent / "bench-work" / "memory"))
    ap.add_argument("--scifact", default=None)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--redo", action="store_true")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    batches = build_fixture(find_scifact(args.scifact), work)
    done = {}
    if args.out and Path(args.out).is_file() and not args.redo:
        done = {r["setting"]: r for r in json.loads(Path(args.out).read_text()).get("rows", []) if "error" not in r}
    rows = list(done.values())
    for name in args.settings.split(","):
        if name in done:
            continue
        rows.append(run_setting(name, SETTINGS[name], batches, work))
        print(json.dumps(rows[-1]), flush=True)
        result = {"benchmark": "memory", "model": "minilm (all-MiniLM-L6-v2), fp32, CPU",
                  "batches": "SciFact train slice, 32 queries x 4 mined negatives per stored batch, configs/minilm_scifact.yaml",
                  "target": "estimate within 20% of the real peak", "rows": rows}
        write_result("memory", result, args.out)


if __name__ == "__main__":
    main()
