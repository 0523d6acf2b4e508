"""A PLAID index that grew by `add` against a fresh build of the same documents, measured as a new user would.

    python bench/grow_vs_fresh.py                       # the 960-document slice, index seeds 0,1,2
    python bench/grow_vs_fresh.py --full --seeds 0      # full SciFact: 50% built + 50% added vs all built

Everything goes through the public API (embedctl.Index.build / .open / .add / .rank_file) with the
embedded model `minilm` as a ColBERT (model.kind=colbert, every other key at its default) and nDCG@10 from
embedctl.eval on SciFact test queries. Per index seed (index.seed, the k-means seed):

- fresh: all the documents built at once;
- grown: the first half built, then `add` of the second half, once per variant, each on a copy of the same
  half build: `before` (re-clustering off: index.recluster_below_docs=0, index.recluster_add_ratio=null:
  the add compresses the new half with the half build's codec, as embedctl did before the rule) and `after`
  (the defaults: the rule decides); --variants may add `forced` (index.recluster_add_ratio=0.5, for a split
  whose add stays under the default ratio; on --full, 2591 built + 2592 added, `after` re-clusters already). The
  `codes` figures of grow_vs_fresh.json (re-clustering trained on the stored codes and residuals
  decompressed, index.recluster_from=codes) came from commit d6e8da0, where that option existed; it was
  measured no better than not re-clustering and left out.

The slice (default): the first --queries test queries (qids sorted as strings), every document they judge
relevant, and other documents drawn with --slice-seed up to --docs; the --docs documents are then shuffled
with the same seed and cut in two halves (so both halves hold relevant documents). --full: the whole
corpus in file order, cut in two halves, and all 300 test queries (as bench_lifecycle.py's 50%+50%).

Writes bench/results/<machine-kind>/grow_vs_fresh.json (--full: grow_vs_fresh_full.json) through
bench/resultfiles.py, the raw run under bench/work/runs/. About 9 min per seed for the slice on 2 busy
cores, about 35 min for --full.
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
from embedctl.util.qrels import read_qrels  # noqa: E402

VARIANTS = {
    "before": ["index.recluster_below_docs=0", "index.recluster_add_ratio=null"],
    "after": [],
    "forced": ["index.recluster_add_ratio=0.5"],  # re-clusters a 50%+50% split whichever half is larger
}


def load_scifact(path: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    docs = [json.loads(line) for line in (path / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line]
    queries = {}
    for line in (path / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    return docs, queries, read_qrels(str(path / "qrels" / "test.tsv"))


def choose_slice(docs: list[dict], qrels: dict, num_queries: int, num_docs: int, seed: int
                 ) -> tuple[list[str], list[dict]]:
    """(query ids, documents in build order): the queries' relevant documents plus seeded others, shuffled."""
    qids = sorted(qrels)[:num_queries]
    relevant = {d for q in qids for d, grade in qrels[q].items() if grade > 0}
    rng = np.random.default_rng(seed)
    by_id = {d["_id"]: d for d in docs}
    missing = sorted(relevant - set(by_id))
    if missing:
        raise SystemExit(f"qrels name documents the corpus lacks: {missing[:5]}")
    others = [d["_id"] for d in docs if d["_id"] not in relevant]
    if num_docs < len(relevant):
        raise SystemExit(f"--docs {num_docs} is fewer than the {len(relevant)} relevant documents of the queries")
    chosen = sorted(relevant) + [others[i] for i in np.sort(rng.choice(len(others), num_docs - len(relevant),
                                                                       replace=False))]
    order = rng.permutation(len(chosen))
    return qids, [by_id[chosen[i]] for i in order]


class Run:
    def __init__(self, args, work: Path, queries: dict[str, str], qrels: dict, qids: list[str]):
        self.args, self.work = args, work
        self.qids = qids
        self.qrels = {q: qrels[q] for q in qids}
        self.queries_file = work / "queries.tsv"
        self.queries_file.write_text("".join(f"{q}\t{queries[q]}\n" for q in qids), encoding="utf-8")
        self.base = ["model.kind=colbert", f"search.threads={args.threads}"]
        if args.doc_max_length:
            self.base.append(f"model.doc_max_length={args.doc_max_length}")

    def collection(self, name: str, docs: list[dict]) -> Path:
        path = self.work / f"{name}.jsonl"
        path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        return path

    def build(self, name: str, docs: list[dict], seed: int) -> tuple[Path, float]:
        t = time.perf_counter()
        idx = embedctl.Index.build(self.collection(name, docs), self.work / "indexes" / name,
                                   overrides=[*self.base, f"index.seed={seed}"])
        return idx.path, round(time.perf_counter() - t, 2)

    def ndcg(self, path: Path, extra: list[str] = ()) -> float:
        idx = embedctl.Index.open(path, overrides=[*self.base, *extra])
        run = {qid: {h.id: h.score for h in hits} for qid, hits in idx.rank_file(self.queries_file, k=10)}
        return round(float(evaluate_loaded(run, self.qrels, ["ndcg_cut_10"])["ndcg_cut_10"]), 4)

    def grow(self, half: Path, name: str, added: list[dict], variant: str) -> tuple[Path, dict]:
        path = self.work / "indexes" / name
        shutil.copytree(half, path)
        idx = embedctl.Index.open(path, overrides=[*self.base, *VARIANTS[variant]])
        t = time.perf_counter()
        summary = idx.add([{"id": d["_id"], "title": d.get("title") or None, "text": d["text"]} for d in added])
        wall = time.perf_counter() - t
        rc = summary.get("recluster")
        return path, {"add_s": round(wall, 2), "encoded_docs": summary["encoded_docs"],
                      "reclustered": rc["reason"] if rc else None,
                      "num_partitions": rc["num_partitions"] if rc else None,
                      "segments": summary["segments"]}


def one_seed(r: Run, docs: list[dict], seed: int, variants: list[str]) -> dict:
    half = len(docs) // 2
    fresh, fresh_s = r.build(f"fresh-s{seed}", docs, seed)
    out: dict = {"index_seed": seed, "fresh": {"ndcg@10": r.ndcg(fresh), "build_s": fresh_s}}
    shutil.rmtree(fresh)
    base, base_s = r.build(f"half-s{seed}", docs[:half], seed)
    out["half_build_s"] = base_s
    for variant in variants:
        grown, rec = r.grow(base, f"{variant}-s{seed}", docs[half:], variant)
        rec["ndcg@10"] = r.ndcg(grown)
        rec["delta_vs_fresh"] = round(rec["ndcg@10"] - out["fresh"]["ndcg@10"], 4)
        out[variant] = rec
        shutil.rmtree(grown)
    shutil.rmtree(base)
    print(json.dumps(out), flush=True)
    return out


def summarize(runs: list[dict], variants: list[str]) -> dict:
    fresh = [x["fresh"]["ndcg@10"] for x in runs]
    out = {"fresh_mean_ndcg@10": round(float(np.mean(fresh)), 4), "fresh_build_mean_s": round(float(np.mean(
        [x["fresh"]["build_s"] for x in runs])), 2)}
    for v in variants:
        vals = [x[v]["ndcg@10"] for x in runs]
        out[v] = {"mean_ndcg@10": round(float(np.mean(vals)), 4),
                  "mean_delta_vs_fresh": round(float(np.mean(vals) - np.mean(fresh)), 4),
                  "deltas": [x[v]["delta_vs_fresh"] for x in runs],
                  "mean_add_s": round(float(np.mean([x[v]["add_s"] for x in runs])), 2)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scifact")
    p.add_argument("--docs", type=int, default=960, help="documents of the slice (built + added)")
    p.add_argument("--queries", type=int, default=60, help="test queries whose relevant documents the slice holds")
    p.add_argument("--slice-seed", type=int, default=0)
    p.add_argument("--full", action="store_true", help="the whole corpus, 50%% + 50%%, all 300 test queries")
    p.add_argument("--seeds", default="0,1,2", help="index.seed values (k-means)")
    p.add_argument("--variants", default="before,after", help="comma list of before,after,forced")
    p.add_argument("--doc-max-length", type=int, default=None, help="model.doc_max_length (default: the model's)")
    p.add_argument("--threads", type=int, default=2, help="search.threads")
    p.add_argument("--note", default="host shared with other agents (2 cores): timings are indicative")
    p.add_argument("--out")
    args = p.parse_args()
    docs, queries, qrels = load_scifact(find_scifact(args.scifact))
    if args.full:
        qids = sorted(qrels)
    else:
        qids, docs = choose_slice(docs, qrels, args.queries, args.docs, args.slice_seed)
    variants = args.variants.split(",")
    (REPO / "bench" / "work").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="grow_vs_fresh_", dir=REPO / "bench" / "work"))
    r = Run(args, work, queries, qrels, qids)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = [one_seed(r, docs, seed, variants) for seed in seeds]
    result = {"model": "minilm (model.kind=colbert, defaults otherwise)", "full": args.full,
              "documents": len(docs), "built": len(docs) // 2, "added": len(docs) - len(docs) // 2,
              "queries": len(qids), "slice_seed": None if args.full else args.slice_seed,
              "doc_max_length": args.doc_max_length, "search_threads": args.threads,
              "variants": {v: VARIANTS[v] for v in variants}, "note": args.note,
              "summary": summarize(runs, variants), "runs": runs}
    print(json.dumps(result["summary"], indent=1))
    write_result("grow_vs_fresh_full" if args.full else "grow_vs_fresh", result, args.out)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
