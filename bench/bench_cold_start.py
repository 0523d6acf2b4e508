"""Cold start of `embedctl search`: one query from process start to the printed table, as a whole process.

    python bench/bench_cold_start.py [--index DIR ...] [--runs 7] [--vs /path/to/other/checkout] [--out FILE]

Times ``python -m embedctl search --index DIR "QUERY"`` as a fresh process (wall, user and system CPU seconds
and peak RSS from the operating system's accounting of the finished child), ``--runs`` times after
``--warmup`` runs not counted (the first run also fills the tokenizer cache), and reports min / median / max.
``--vs CHECKOUT`` times a second checkout's embedctl in turn (A B A B ...) with the same interpreter and
packages, gives the ratio pair by pair (A = ``--repo``, default this checkout) and checks that both print
the same hits. One more run under ``python -X importtime`` gives where the import time goes: seconds per
top-level package (self time summed), the heaviest import subtrees, and which heavy libraries were loaded.

Without ``--index``: builds two fixtures from the first ``--docs`` SciFact documents under ``--work`` (outside
the repository; reused when present): a PLAID index with the bundled model as ColBERT and a dense index.
Writes to --out (default bench/results/<machine-kind>/cold_start.json) and the run under bench/work/runs/.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "tokenizers", "safetensors", "faiss", "pyarrow", "pyarrow.compute", "numpy.ma",
         "omegaconf", "yaml", "fsspec", "rich", "typer", "pydantic", "huggingface_hub", "sklearn", "scipy", "pandas")


def build_fixtures(scifact: Path, work: Path, docs: int) -> list[Path]:
    """PLAID (model.kind=colbert) and dense indexes of the first ``docs`` documents, built once under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus{docs}.jsonl"
    if not corpus.is_file():
        with open(scifact / "corpus.jsonl", encoding="utf-8") as src:
            corpus.write_text("".join(itertools.islice(src, docs)), encoding="utf-8")
    out = []
    for name, extra in ((f"plaid{docs}", ["model.kind=colbert"]), (f"dense{docs}", [])):
        index = work / "indexes" / name
        if not (index / "embedctl_index.json").is_file():
            print(f"building {index} ...", flush=True)
            subprocess.run([sys.executable, "-m", "embedctl", "index", *extra, "--collection", str(corpus),
                            "--root", str(index.parent), "--name", name], check=True, cwd=REPO)
        out.append(index)
    return out


def run_once(repo: Path, argv: list[str], prefix: tuple[str, ...] = ()) -> dict:
    """One process: wall seconds, user / system CPU seconds and peak RSS (wait4), exit code, stdout, stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *prefix, "-m", "embedctl", *argv], stdout=out, stderr=err,
                                cwd=repo, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"wall": wall, "user": usage.ru_utime, "sys": usage.ru_stime, "cpu": usage.ru_utime + usage.ru_stime,
                "peak_mib": usage.ru_maxrss / 1024, "rc": proc.returncode,
                "stdout": out.read().decode("utf-8", "replace"), "stderr": err.read().decode("utf-8", "replace")}


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


def importtime(stderr: str, top: int = 15) -> dict:
    """Self seconds per top-level package, the heaviest import subtrees, and the heavy libraries loaded."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            self_us, cumulative_us, name = line.split(":", 1)[1].split("|")
            rows.append((int(self_us), int(cumulative_us), name.rstrip()))
    packages: dict[str, list[float]] = {}
    for self_us, _, name in rows:
        entry = packages.setdefault(name.strip().split(".")[0], [0.0, 0])
        entry[0] += self_us / 1e6
        entry[1] += 1
    loaded = {name.strip() for _, _, name in rows}
    # names are indented two spaces per level below the separator's one: a level-0 import is one the running
    # code asked for (not another module), and its cumulative time is the whole subtree it pulled in
    roots = sorted(((c, n.strip()) for _, c, n in rows if len(n) - len(n.lstrip()) == 1), reverse=True)
    return {"total_s": round(sum(s for s, _, _ in rows) / 1e6, 3),
            "packages": [{"package": p, "self_s": round(s, 3), "modules": n}
                         for p, (s, n) in sorted(packages.items(), key=lambda kv: -kv[1][0])[:top]],
            "subtrees": [{"module": n, "cumulative_s": round(c / 1e6, 3)} for c, n in roots[:top]],
            "heavy_loaded": [m for m in HEAVY if m in loaded and _installed(m)]}


def _installed(module: str) -> bool:
    """False for a library that is not installed (a failed, caught ``import pandas`` is listed all the same)."""
    return importlib.util.find_spec(module.split(".")[0]) is not None


def hits_of(stdout: str) -> str:
    """The printed table (the hits), what must not change between checkouts."""
    return stdout.strip()


def measure(index: Path, query: str, repos: dict[str, Path], runs: int, warmup: int) -> dict:
    argv = ["search", "--index", str(index), query]
    for _ in range(warmup):
        for repo in repos.values():
            run_once(repo, argv)
    got: dict[str, list[dict]] = {name: [] for name in repos}
    for _ in range(runs):  # in turn, so a drift of the machine's speed reaches both alike
        for name, repo in repos.items():
            got[name].append(run_once(repo, argv))
    meta = json.loads((index / "embedctl_index.json").read_text(encoding="utf-8"))
    result: dict = {"index": str(index), "kind": meta["kind"], "num_docs": meta["num_docs"],
                    "model_kind": meta["model"]["kind"]}
    for name, results in got.items():
        failed = [r for r in results if r["rc"] != 0]
        if failed:
            sys.exit(f"{name}: `embedctl {' '.join(argv)}` exited {failed[0]['rc']}:\n{failed[0]['stderr'][-2000:]}")
        result[name] = {key: spread([r[key] for r in results]) for key in ("wall", "user", "sys", "cpu")}
        result[name]["peak_mib"] = spread([r["peak_mib"] for r in results], 1)
        result[name]["same_hits_every_run"] = len({hits_of(r["stdout"]) for r in results}) == 1
        result[name]["importtime"] = importtime(run_once(repos[name], argv, ("-X", "importtime"))["stderr"])
    if "B" in got:
        result["ratio_A_over_B"] = {key: spread([a[key] / b[key] for a, b in zip(got["A"], got["B"], strict=True)])
                                    for key in ("wall", "cpu")}
        result["same_hits_A_B"] = hits_of(got["A"][0]["stdout"]) == hits_of(got["B"][0]["stdout"])
    result["hits"] = hits_of(got["A"][0]["stdout"]).splitlines()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", action="append", type=Path, help="index folder (repeatable); default: build fixtures")
    ap.add_argument("--query", default="what causes scurvy")
    ap.add_argument("--runs", type=int, default=7, help="counted runs per checkout and index")
    ap.add_argument("--warmup", type=int, default=1, help="runs not counted, first (fills the tokenizer cache)")
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose embedctl is timed (A)")
    ap.add_argument("--vs", type=Path, help="a second checkout (B), timed in turn with A: ratio and same hits")
    ap.add_argument("--scifact", help="BEIR SciFact folder (fixtures)")
    ap.add_argument("--docs", type=int, default=2000, help="documents in the fixtures")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "embedctl_cold_start",
                    help="where fixtures are built (outside the repository)")
    ap.add_argument("--out", help="result file (default bench/results/<machine-kind>/cold_start.json)")
    args = ap.parse_args()
    indexes = args.index or build_fixtures(find_scifact(args.scifact), args.work, args.docs)
    repos = {"A": args.repo.resolve(), **({"B": args.vs.resolve()} if args.vs else {})}
    results = {}
    for index in indexes:
        results[index.name] = measure(index, args.query, repos, args.runs, args.warmup)
        r = results[index.name]
        line = f"{index.name} ({r['kind']}): A wall median {r['A']['wall']['median']:.2f} s (min {r['A']['wall']['min']:.2f})"
        if "B" in r:
            line += (f", B {r['B']['wall']['median']:.2f} s (min {r['B']['wall']['min']:.2f}); A/B wall median "
                     f"{r['ratio_A_over_B']['wall']['median']:.3f}; same hits: {r['same_hits_A_B']}")
        print(line, flush=True)
        for p in r["A"]["importtime"]["packages"][:8]:
            print(f"    import {p['package']:<16} {p['self_s']:.3f} s ({p['modules']} modules)")
    write_result("cold_start", {"query": args.query, "runs": args.runs, "warmup": args.warmup,
                                "repo": {k: str(v) for k, v in repos.items()}, "indexes": results}, args.out)


if __name__ == "__main__":
    main()
