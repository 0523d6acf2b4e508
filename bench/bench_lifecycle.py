"""Indexes that live, on SciFact: quality and cost of add / delete / compact against fresh builds.

    python bench/bench_lifecycle.py [--max-docs N] [--queries Q] [--doc-max-length L] [--threads T] [--out FILE]
    python bench/bench_lifecycle.py --delete-seeds 0,1,2     # the delete-quality comparison over k-means seeds
    python bench/bench_lifecycle.py --merge A.json --merge B.json   # combine the seeds of earlier such runs

The embedded model `minilm` as a ColBERT (model.kind=colbert), PLAID, every index built with the real
`embedctl index` driver and changed through the Python API (embedctl.Index: build, add, delete, compact):

- quality: a build of 50% of the documents + `add` of the other 50% vs a full build (nDCG@10 of the test
  queries, PLAID k=10), the same for 90% + 10%; delete: a full build minus the documents that no test query
  judges relevant in a random 20%, vs a build without them;
- cost: add throughput (docs/s, encoding included) vs the model alone encoding the same documents
  (encode-bound); delete of 1, 100 and 10,000 ids (capped at the deletable ids): time per call, with the
  index size; search p50 (k=10, one query at a time) after 20 adds of 1% each vs after `compact`;
  compact time vs the fresh build of the same documents (no re-encoding).
- colbert-ai's IndexUpdater on the same sequence: bench/bench_lifecycle_colbertai.py (peer kit venvs), which
  reads this script's lifecycle.json for the side-by-side table.

Writes bench/results/<machine-kind>/lifecycle.json through bench/resultfiles.py (and the raw run under
bench/work/runs/). Long (several full builds). Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.evaluate import evaluate_loaded  # noqa: E402
from embedctl.eval.io import read_qrels  # noqa: E402


class Bench:
    def __init__(self, args, work: Path):
        self.args, self.work = args, work
        sf = find_scifact(args.scifact)
        self.docs = [json.loads(line) for line in (sf / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
        self.qrels = read_qrels(str(sf / "qrels" / "test.tsv"))
        queries = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (sf / "queries.jsonl").read_text().splitlines()}
        self.queries = [(q, queries[q]) for q in sorted(self.qrels)[: args.queries]]
        if args.max_docs:  # a subset that keeps every judged document of the chosen queries
            judged = {d for q, _ in self.queries for d in self.qrels[q]}
            keep = [d for d in self.docs if d["_id"] in judged]
            keep += [d for d in self.docs if d["_id"] not in judged][: max(0, args.max_docs - len(keep))]
            self.docs = keep
        self.overrides = ["model.kind=colbert", f"model.doc_max_length={args.doc_max_length}", "search.threads="
                          + str(args.threads), f"index.root={work / 'indexes'}"]
        self.encoder = None

    def write(self, name: str, docs: list[dict]) -> Path:
        path = self.work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        return path

    def build(self, name: str, docs: list[dict], seed: int = 0) -> tuple[Path, dict]:
        coll = self.write(name, docs)
        t = time.perf_counter()
        summary = embedctl.Index.build(coll, self.work / "indexes" / name, overrides=[*self.overrides, f"index.seed={seed}"]
                                       ).summary
        meta = json.loads((Path(summary["index"]) / "embedctl_index.json").read_text())
        return Path(summary["index"]), {"docs": len(docs), "build_s": round(time.perf_counter() - t, 2),
                                        "encode_s": meta["timings"].get("encode_s")}

    def open(self, index: Path) -> embedctl.Index:
        """The index opened with the one encoder of the bench (loaded by the first index opened)."""
        opened = embedctl.Index.open(index, overrides=self.overrides, encoder=self.encoder)
        if self.encoder is None:
            self.encoder = opened.encoder
        return opened

    def quality(self, index: Path) -> dict:
        opened = self.open(index)
        run, times = {}, []
        for qid, text in self.queries:
            t = time.perf_counter()
            hits = opened.search(text, 10, text=False)
            times.append(time.perf_counter() - t)
            run[qid] = {h.id: h.score for h in hits}
        qrels = {q: self.qrels[q] for q, _ in self.queries}
        metrics = evaluate_loaded(run, qrels, ["ndcg_cut_10"])
        return {"ndcg@10": round(float(metrics["ndcg_cut_10"]), 4),
                "query_p50_ms": round(1000 * float(np.median(times)), 2)}

    def search_p50(self, index: Path, repeats: int = 3) -> float:
        session = self.open(index).session  # retrieval alone: the engine's retriever of the opened version
        Q = [self.encoder.encode_queries([t]) for _, t in self.queries]
        retriever = session.retriever
        times = []
        for _ in range(repeats):
            for q in Q:
                t = time.perf_counter()
                retriever.search(q, 10)
                times.append(time.perf_counter() - t)
        return round(1000 * float(np.median(times)), 3)

    def add(self, index: Path, docs: list[dict]) -> dict:
        records = [(d["_id"], d.get("title") or None, d["text"]) for d in docs]
        s = self.open(index).add(records)
        return {k: s.get(k) for k in ("added", "encode_s", "docs_per_s", "seconds", "drift", "generation")}


def split_quality(b: Bench, frac: float, full_quality: dict) -> dict:
    n = len(b.docs)
    first = int(round(frac * n))
    index, build = b.build(f"part{int(frac * 100)}", b.docs[:first])
    added = b.add(index, b.docs[first:])
    q = b.quality(index)
    return {"built_docs": first, "added_docs": n - first, "build": build, "add": added, **q,
            "delta_ndcg@10_vs_full": round(q["ndcg@10"] - full_quality["ndcg@10"], 4)}


def unjudged_fifth(b: Bench, seed: int) -> list[str]:
    """The ids of a random 20% of the documents (seeded), minus every document a test query judges."""
    rng = np.random.default_rng(seed)
    judged = {d for q in b.qrels.values() for d in q}
    chosen = rng.choice(len(b.docs), size=len(b.docs) // 5, replace=False)
    return sorted({b.docs[i]["_id"] for i in chosen} - judged)


def delete_over_seeds(b: Bench, seeds: list[int], gone: list[str]) -> list[dict]:
    """Full build + delete vs a build without the deleted documents, with the same k-means seed
    (index.seed) on both sides, once per seed: one seed's difference is within PLAID's seed-to-seed
    spread (bench/results/*/plaid_seeds.json), the mean over seeds (:func:`seeds_summary`) is the figure."""
    runs = []
    for seed in seeds:
        full, _ = b.build(f"full-s{seed}", b.docs, seed)
        b.open(full).delete(gone)
        without, _ = b.build(f"without-s{seed}", [d for d in b.docs if d["_id"] not in set(gone)], seed)
        dq, wq = b.quality(full)["ndcg@10"], b.quality(without)["ndcg@10"]
        runs.append({"index_seed": seed, "after_delete_ndcg@10": dq, "fresh_build_without_ndcg@10": wq,
                     "delta_ndcg@10": round(dq - wq, 4)})
        print(json.dumps(runs[-1]), flush=True)
        shutil.rmtree(full, ignore_errors=True)
        shutil.rmtree(without, ignore_errors=True)
    return runs


def seeds_summary(deleted: int, runs: list[dict]) -> dict:
    deltas = [r["delta_ndcg@10"] for r in runs]
    return {"deleted": deleted, "runs": runs, "mean_delta_ndcg@10": round(float(np.mean(deltas)), 4),
            "mean_after_delete": round(float(np.mean([r["after_delete_ndcg@10"] for r in runs])), 4),
            "mean_fresh_build_without": round(float(np.mean([r["fresh_build_without_ndcg@10"] for r in runs])), 4),
            "spread_fresh_build_without": round(float(np.ptp([r["fresh_build_without_ndcg@10"] for r in runs])), 4)}


def merged_runs(path: Path, deleted: int, seeds: list[int]) -> tuple[list[dict], str]:
    """The runs of an earlier --delete-seeds result (same deletions, other seeds) and the command that made it."""
    earlier = json.loads(path.read_text(encoding="utf-8"))
    part = earlier["delete_20pct_unjudged_over_seeds"]
    if part["deleted"] != deleted:
        raise SystemExit(f"--merge {path}: it deleted {part['deleted']} documents, this run deletes {deleted}; "
                         "merge only runs of the same --seed and corpus")
    clash = sorted({r["index_seed"] for r in part["runs"]} & set(seeds))
    if clash:
        raise SystemExit(f"--merge {path}: index seeds {clash} are in both; pass other --delete-seeds")
    return part["runs"], earlier["provenance"]["command"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scifact")
    p.add_argument("--max-docs", type=int, default=None, help="a subset (judged documents kept) for a quick run")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--doc-max-length", type=int, default=180)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--delete-seeds", default=None,
                   help="only the delete-quality comparison, repeated with these index seeds (e.g. 0,1,2); "
                        "writes bench/results/<kind>/lifecycle_delete_seeds.json")
    p.add_argument("--merge", type=Path, action="append", default=[],
                   help="add the runs of an earlier lifecycle_delete_seeds.json (other seeds; repeatable); "
                        "without --delete-seeds only combines them")
    p.add_argument("--note", default="host shared with other agents while this ran (2 cores): timings are indicative")
    p.add_argument("--out")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_lifecycle_", dir=REPO / "bench" / "work"))
    b = Bench(args, work)
    n = len(b.docs)
    result: dict = {"model": "minilm (model.kind=colbert)", "num_docs": n, "queries": len(b.queries),
                    "doc_max_length": args.doc_max_length, "threads": args.threads, "note": args.note}
    if args.delete_seeds or args.merge:
        seeds = [int(x) for x in args.delete_seeds.split(",")] if args.delete_seeds else []
        gone = unjudged_fifth(b, args.seed)
        runs: list[dict] = []
        for path in args.merge:
            earlier, command = merged_runs(path, len(gone), seeds + [r["index_seed"] for r in runs])
            runs += earlier
            result.setdefault("merged_from", []).append(
                {"file": str(path), "command": command, "seeds": [r["index_seed"] for r in earlier]})
        runs += delete_over_seeds(b, seeds, gone)
        result["delete_20pct_unjudged_over_seeds"] = seeds_summary(len(gone), runs)
        write_result("lifecycle_delete_seeds", result, args.out)
        shutil.rmtree(work, ignore_errors=True)
        return
    full, full_build = b.build("full", b.docs)
    full_q = b.quality(full)
    result["full_build"] = {**full_build, **full_q, "bytes": b.open(full).info()["bytes"]}

    # encode-bound: the model alone on the documents an add encodes
    sample = b.docs[n // 2:]
    texts = [f"{d['title']} {d['text']}" if d.get("title") else d["text"] for d in sample]
    t = time.perf_counter()
    b.encoder.encode_documents(texts, batch_size=32)
    model_alone = len(texts) / (time.perf_counter() - t)

    result["add_50_50"] = split_quality(b, 0.5, full_q)
    result["add_50_50"]["encode_bound_docs_per_s"] = round(model_alone, 1)
    result["add_50_50"]["add_vs_encode_bound"] = round(result["add_50_50"]["add"]["docs_per_s"] / model_alone, 3)
    result["add_90_10"] = split_quality(b, 0.9, full_q)

    # delete quality: a random 20%, minus every judged document
    gone = unjudged_fifth(b, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    deleted = b.work / "indexes" / "deleted"
    shutil.copytree(full, deleted)
    t = time.perf_counter()
    b.open(deleted).delete(gone)
    delete_s = time.perf_counter() - t
    without, without_build = b.build("without", [d for d in b.docs if d["_id"] not in set(gone)])
    dq, wq = b.quality(deleted), b.quality(without)
    result["delete_20pct_unjudged"] = {"deleted": len(gone), "delete_s": round(delete_s, 4), "after_delete": dq,
                                       "fresh_build_without": {**without_build, **wq},
                                       "delta_ndcg@10": round(dq["ndcg@10"] - wq["ndcg@10"], 4)}

    # delete cost: 1, 100, 10,000 ids (capped), each on a fresh copy of the full index
    costs = []
    for count in (1, 100, 10_000):
        ids = [b.docs[i]["_id"] for i in rng.choice(n, size=min(count, n), replace=False)]
        copy = b.work / "indexes" / f"del{count}"
        shutil.copytree(full, copy)
        t = time.perf_counter()
        b.open(copy).delete(ids)
        costs.append({"ids": len(ids), "seconds": round(time.perf_counter() - t, 4), "index_docs": n})
        shutil.rmtree(copy)
    result["delete_cost"] = costs

    # 20 adds of 1% each on an 80% build, then compact; search p50 and compact time vs a fresh build
    base_n = int(0.8 * n)
    grown, grown_build = b.build("grown", b.docs[:base_n])
    step = max(1, n // 100)
    adds = []
    for i in range(20):
        part = b.docs[base_n + i * step: base_n + (i + 1) * step]
        if part:
            adds.append(b.add(grown, part))
    p50_segments = b.search_p50(grown)
    segments = b.open(grown).info()["segments"]
    t = time.perf_counter()
    compacted = b.open(grown).compact()
    compact_s = time.perf_counter() - t
    p50_compacted = b.search_p50(grown)
    same_docs = b.docs[: base_n + 20 * step]
    fresh, fresh_build = b.build("fresh", same_docs)
    result["twenty_adds"] = {"base_docs": base_n, "adds": len(adds), "docs_per_add": step, "segments": segments,
                             "search_p50_ms_segments": p50_segments, "search_p50_ms_compacted": p50_compacted,
                             "search_p50_ms_fresh_build": b.search_p50(fresh),
                             "p50_segments_vs_compacted": round(p50_segments / p50_compacted, 3),
                             "compact_s": round(compact_s, 3), "fresh_build_s": fresh_build["build_s"],
                             "bytes_compacted": compacted["bytes"], "bytes_fresh_build": b.open(fresh).info()["bytes"],
                             "quality_compacted": b.quality(grown), "quality_fresh_build": b.quality(fresh),
                             "add_seconds": [a["seconds"] for a in adds]}
    result["colbert_ai_index_updater"] = "bench/bench_lifecycle_colbertai.py -> lifecycle_colbertai.json"
    write_result("lifecycle", result, args.out)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
