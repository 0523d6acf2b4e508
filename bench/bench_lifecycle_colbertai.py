"""colbert-ai 0.2.22's IndexUpdater on the add / delete sequence of bench_lifecycle.py, with our figures beside it.

    python bench/bench_lifecycle_colbertai.py [--max-docs N] [--model embedctl|kit] [--only full,add,delete,twenty]
                                              [--peers-work DIR] [--ours FILE] [--out FILE] [--keep] [--reuse DIR]

Full run (SciFact, 5183 documents; about 60-75 min on a quiet 2-core host, most of it colbert-ai's six builds,
from the kit's 515 s full build on this machine kind; hours if niced beside other jobs):

    nice -n 19 .venv/bin/python bench/bench_lifecycle_colbertai.py

(Measured: 90 min with OMP_NUM_THREADS=1 and the experiments in two processes at once, full + add in one
folder and delete + twenty in another (`--keep`, then `--reuse`), on the 2-core host.)

Quick check (the judged documents + the first unjudged ones, 600 in all; 84 min niced beside a busy benchmark):

    nice -n 19 .venv/bin/python bench/bench_lifecycle_colbertai.py --max-docs 600

The same documents, in the same order, as bench_lifecycle.py (its ``Bench`` picks them, --max-docs included), the
same halves (the first round(0.5 n) / round(0.9 n) built, the rest added), the same random 20% (numpy seed 0)
minus every judged document deleted, the same 1 / 100 / 10,000 (capped) ids for the delete cost and the same 20
adds of 1% on an 80% build. Each is run by colbert-ai in the peer kit's colbert venv (../shared/peers/setup.sh;
DIR/peers-work/venv-colbert), one worker process per experiment (bench/colbertai_lifecycle_worker.py; a crash
loses one experiment, not the run):

- full: ``Indexer`` over every document (ColBERTConfig as the kit's colbertai_index.py: nbits 2, doc_maxlen 180,
  query_maxlen 32, kmeans_niters 4, nranks 1), then ``Searcher`` at k=100 (colbert-ai's own k=100 settings,
  ncells 2, centroid_score_threshold 0.45, ndocs 1024, as the kit's colbertai_search.py sets them);
- add 50+50 and 90+10: ``Indexer`` over the first part, ``IndexUpdater(config, searcher, checkpoint).add(texts)``,
  search with that searcher (in memory), ``persist_to_disk()``, search again with a fresh ``Searcher``; the new
  pids (appended after the built ones) are mapped back to the SciFact ids; a self-retrieval check (50 added
  documents searched with their own text: found in the top 10?) tells whether added documents are reachable;
- delete: a copy of the full index, ``IndexUpdater.remove(pids)``, search in memory, ``persist_to_disk()``, a fresh
  ``Searcher``, vs colbert-ai's own build without those documents; delete cost: ``remove`` of 1, 100, 10,000
  (capped) ids on fresh copies, ``persist_to_disk`` timed for 1 and 100 (it rewrites the chunk once per pid);
- twenty: 20 ``add`` + ``persist_to_disk`` of 1% each on an 80% build (one IndexUpdater, colbert-ai's
  documented use), a fresh ``Searcher``, vs a fresh build of the same documents; self-retrieval per add.

A colbert-ai step that fails (its known defects: #369 AssertionError on add, #343 only the first add found, #261
results differ after persist_to_disk) is recorded with its error and traceback tail, and the steps that do not
need it go on. colbert-ai's optimize_ivf pads ivf.pid.pt with max(lengths) trailing zeros, which
IndexUpdater._add_pid_to_ivf asserts are not there (#369) and _remove_pid_from_ivf counts as pid 0 (IndexError
when pid 0 is removed); so each add sequence also runs, on its own copy of the same build, with that padding
stripped from the updater's IVF (``workaround_*`` steps, column ``colbert_ai_workaround``), and a remove that
fails as shipped is retried that way. ``index_facts`` record the padding and metadata.json's num_embeddings
against the real sum of doclens (persist_to_disk adds the whole index's count each time). Rankings are written as TREC runs and scored with embedctl.eval (evaluate_files: nDCG@10, MRR@10,
Recall@10/100 on SciFact test).

--model embedctl (default) exports the encoder bench_lifecycle.py uses (minilm as a ColBERT, embedctl's fresh
128-d projection, seed 12345, doc length 180) in the Stanford layout (embedctl.models.save_stanford) so both
systems encode with the same weights; the export is checked against embedctl's own vectors (as
check_colbert_layouts.py does). --model kit uses the kit's shared model (DIR/peers-work/minilm-colbert-ai,
PyLate's seed-0 projection; made by the kit's convert_to_colbert_ai.py): absolute nDCG then differs from ours.

Our figures are read from bench/results/<machine-kind>/lifecycle.json (bench_lifecycle.py is not rerun) into
a side-by-side table. Writes bench/results/<machine-kind>/lifecycle_colbertai.json through resultfiles.py (quick
runs: bench/work/lifecycle_colbertai_smoke.json), every run also under bench/work/runs/. Not in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from bench_lifecycle import Bench
from benchdata import find_scifact
from resultfiles import latest_path, write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_PEERS = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
EXPERIMENTS = ("full", "add", "delete", "twenty")

# colbert-ai runs in its own venv: bench/colbertai_lifecycle_worker.py, one process per experiment.
WORKER = Path(__file__).resolve().parent / "colbertai_lifecycle_worker.py"


def clean(s: str) -> str:
    """The kit's text cleaning (common.clean): one line, single spaces (colbert-ai reads a TSV)."""
    return " ".join(s.replace("\t", " ").replace("\n", " ").replace("\r", " ").split())


def export_model(b: Bench, work: Path, python: Path) -> tuple[Path, dict]:
    """embedctl's lifecycle encoder in the Stanford layout, and a check that colbert-ai's Checkpoint encodes
    with it the vectors embedctl does (check_colbert_layouts.py's comparison)."""
    from check_colbert_layouts import COLBERT_AI, DOCS, QUERIES, cosines

    from embedctl.config import load_config
    from embedctl.models.checkpoint import save_stanford
    from embedctl.models.encoder import load_encoder

    model_cfg = load_config(None, b.overrides).cfg.model
    enc = load_encoder(model_cfg)
    folder = work / "model-stanford"
    save_stanford(enc, str(folder))
    info = {"source": "embedctl minilm as a ColBERT (the encoder bench_lifecycle.py loads), exported by save_stanford",
            "settings": {k: getattr(model_cfg, k) for k in ("name_or_path", "dim", "query_max_length", "doc_max_length",
                                                            "attend_to_mask_tokens", "mask_punctuation")}}
    chk = work / "model-check"
    chk.mkdir(exist_ok=True)  # --reuse: a kept folder has one
    (chk / "texts.json").write_text(json.dumps({"queries": QUERIES, "docs": DOCS}))
    Q = enc.encode_queries(QUERIES)
    D, doclens = enc.encode_documents(DOCS)
    proc = subprocess.run([str(python), "-c", COLBERT_AI, str(folder), str(chk)], capture_output=True, text=True,
                          env=ENV, timeout=900)
    if proc.returncode:
        info["check"] = {"ran": False, "why": proc.stderr[-1500:]}
    else:
        q, d = cosines(Q, np.load(chk / "colbertai_Q.npy")), cosines(D, np.load(chk / "colbertai_D.npy"))
        same_lens = np.load(chk / "colbertai_doclens.npy").tolist() == doclens.tolist()
        info["check"] = {"ran": True, "doclens_equal": same_lens, "queries": q, "documents": d,
                         "same_vectors": bool(same_lens and all(x.get("same_shape") and x["min_cosine"] >= 0.9999
                                                                for x in (q, d)))}
    del enc
    return folder, info


def run_worker(python: Path, work: Path, spec: dict, timeout: int, reuse: bool = False) -> dict:
    name = spec["experiment"] + (f"-{spec['tag']}" if "tag" in spec else "")
    spec_path, log = work / f"spec-{name}.json", work / f"worker-{name}.log"
    spec["out"] = str(work / f"result-{name}.json")
    if reuse and Path(spec["out"]).is_file():  # --reuse: taken as it is, as far as its worker got
        print(f"[lifecycle_colbertai] {name}: reusing {spec['out']}", flush=True)
        return {**json.loads(Path(spec["out"]).read_text()), "reused_from": spec["out"]}
    spec_path.write_text(json.dumps(spec))
    print(f"[lifecycle_colbertai] {name}: colbert-ai worker (log {log})", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        try:
            proc = subprocess.run([str(python), str(WORKER), str(spec_path)], cwd=work,
                                  env=ENV, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    out = json.loads(Path(spec["out"]).read_text()) if Path(spec["out"]).exists() else {"steps": {}}
    out["worker_wall_s"] = round(time.perf_counter() - t0, 1)
    if rc != 0:
        out["worker_returncode"] = rc
        out["worker_log_tail"] = log.read_text(errors="replace")[-3000:]
    bad = [k for k, v in out["steps"].items() if v.get("ok") is False]
    print(f"[lifecycle_colbertai] {name}: rc={rc} {out['worker_wall_s']} s; failed steps: {bad or 'none'}", flush=True)
    return out


def evaluate_searches(out: dict, qrels: Path) -> None:
    """Score every search step's TREC run with embedctl.eval (SciFact test qrels)."""
    from embedctl.eval.evaluate import evaluate_files

    for st in out.get("steps", {}).values():
        run = st.pop("run", None)
        if run and Path(run).is_file() and Path(run).stat().st_size:
            m = evaluate_files(run, str(qrels), None)
            st["ndcg@10"] = round(float(m["nDCG@10"]), 4)
            st["recall@100"] = round(float(m["Recall@100"]), 4)
            st["mrr@10"] = round(float(m["MRR@10"]), 4)
            st["_run"] = run
        elif run:
            st["ndcg@10"] = 0.0
            st["note"] = "empty ranking"


def top10_agreement(run_a: str | None, run_b: str | None) -> dict | None:
    """Share of queries whose top-10 ids are the same in two runs (in memory vs after persist_to_disk)."""
    if not (run_a and run_b):
        return None
    from embedctl.eval.io import read_run

    a, b = read_run(run_a), read_run(run_b)
    top = lambda r, q: [d for d, _ in sorted(r.get(q, {}).items(), key=lambda x: -x[1])[:10]]  # noqa: E731
    qs = sorted(set(a) | set(b))
    same = sum(top(a, q) == top(b, q) for q in qs)
    return {"queries": len(qs), "same_top10": same, "share": round(same / max(1, len(qs)), 4)}


def step_fig(out: dict | None, name: str, key: str = "seconds"):
    st = (out or {}).get("steps", {}).get(name) or {}
    if st.get("ok") is False:
        return f"FAILED: {st.get('error', '')[:200]}"
    if st.get("ok") is None:
        return None if not st else f"skipped: {st.get('skipped')}"
    return st.get(key)


def side_by_side(ours: dict | None, theirs: dict, n: int) -> list[dict]:
    """One row per figure: ours (lifecycle.json) beside colbert-ai's as shipped and, for the adds, colbert-ai
    with the IVF padding stripped before ``add`` (``workaround``)."""
    o = ours or {}
    full = theirs.get("full")
    full_ndcg = step_fig(full, "search", "ndcg@10")

    def delta(x, ref=full_ndcg):
        return round(x - ref, 4) if isinstance(x, float) and isinstance(ref, float) else None

    def found_of(exp, name):
        st = (exp or {}).get("steps", {}).get(name)
        return f"{st['found_top10']}/{st['checked']}" if st and st.get("ok") else step_fig(exp, name)

    def row(step, figure, ours_value, theirs_value, workaround=None):
        r = {"step": step, "figure": figure, "ours": ours_value, "colbert_ai": theirs_value}
        if workaround is not None:
            r["colbert_ai_workaround"] = workaround
        return r

    rows = [row("full build", "build_s", (o.get("full_build") or {}).get("build_s"), step_fig(full, "build")),
            row("full build", "nDCG@10", (o.get("full_build") or {}).get("ndcg@10"), full_ndcg)]
    for key, tag in (("add_50_50", "add_50"), ("add_90_10", "add_90")):
        oa, ta = o.get(key) or {}, theirs.get(tag)
        both = lambda name, k="seconds", ta=ta: [step_fig(ta, pre + name, k) for pre in ("", "workaround_")]  # noqa: E731
        ndcg_mem, ndcg_disk = both("search_in_memory", "ndcg@10"), both("search_after_persist", "ndcg@10")
        # after a failed add the persisted index answers from the built part only: say so beside the figure
        ndcg_disk_shown = [f"{x} (add failed: only the built part is reachable)" if isinstance(a, str) and
                           isinstance(x, float) else x for x, a in zip(ndcg_disk, both("add"), strict=True)]
        found = [found_of(ta, pre + "self_retrieval_after_persist") for pre in ("", "workaround_")]
        rows += [
            row(key, "build_s (first part)", (oa.get("build") or {}).get("build_s"), step_fig(ta, "build")),
            row(key, "add_s (encoding included)", (oa.get("add") or {}).get("seconds"), *both("add")),
            row(key, "add docs/s", (oa.get("add") or {}).get("docs_per_s"), *both("add", "docs_per_s")),
            row(key, "persist_s", "- (on disk when add returns)", *both("persist")),
            row(key, "nDCG@10 after add, in memory", oa.get("ndcg@10"), *ndcg_mem),
            row(key, "nDCG@10 after add, persisted + fresh Searcher", oa.get("ndcg@10"), *ndcg_disk_shown),
            row(key, "delta nDCG@10 vs own full build", oa.get("delta_ndcg@10_vs_full"),
                *[delta(x) if x is y else None for x, y in zip(ndcg_disk, ndcg_disk_shown, strict=True)]),
            row(key, "added documents found by their own text in the top 10 (found/sampled)", None, *found),
        ]
    od, td = o.get("delete_20pct_unjudged") or {}, theirs.get("delete")
    ran_w = "workaround_remove" in (td or {}).get("steps", {})  # only when remove as shipped failed
    dfig = lambda name, k="seconds": [step_fig(td, pre + name, k) for pre in ("", "workaround_")[: 1 + ran_w]]  # noqa: E731
    after = dfig("search_after_persist", "ndcg@10")
    without = step_fig(td, "search_without", "ndcg@10")
    drow = lambda figure, ours_value, values: row("delete_20pct_unjudged", figure, ours_value, *values)  # noqa: E731
    rows += [
        drow("ids deleted", od.get("deleted"), dfig("remove", "pids")),
        drow("delete_s (colbert-ai: remove, in memory)", od.get("delete_s"), dfig("remove")),
        drow("persist_s", "- (on disk when delete returns)", dfig("persist")),
        drow("nDCG@10 after delete, in memory", (od.get("after_delete") or {}).get("ndcg@10"),
             dfig("search_in_memory", "ndcg@10")),
        drow("nDCG@10 after delete, persisted + fresh Searcher", (od.get("after_delete") or {}).get("ndcg@10"), after),
        drow("nDCG@10 fresh build without them", (od.get("fresh_build_without") or {}).get("ndcg@10"),
             [without] * (1 + ran_w)),
        drow("delta nDCG@10 (after delete - fresh build without)", od.get("delta_ndcg@10"),
             [delta(x, without) for x in after]),
    ]
    costs = o.get("delete_cost") or []
    for i, count in enumerate((1, 100, 10_000)):
        oc = costs[i] if len(costs) > i else {}
        figs = [[step_fig(td, f"{pre}cost{count}_remove"), step_fig(td, f"{pre}cost{count}_persist")]
                for pre in ("", "workaround_")]
        rows.append(row(f"delete cost {min(count, n)} ids (ours: {oc.get('ids')} of {oc.get('index_docs')})",
                        "seconds (colbert-ai: [remove, persist])", oc.get("seconds"), figs[0],
                        figs[1] if figs[1][0] is not None else None))
    ot, tt = o.get("twenty_adds") or {}, theirs.get("twenty")
    num = lambda xs: [x for x in xs if isinstance(x, (int, float))]  # noqa: E731

    def adds(pre, what):
        xs = [step_fig(tt, f"{pre}{what}_{k}") for k in range(20)]
        return xs, (round(float(np.mean(num(xs))), 3) if num(xs) else None)

    ran = lambda pre: pre + "updater_init" in (tt or {}).get("steps", {})  # noqa: E731
    both = lambda what: [adds(pre, what)[1] for pre in ("", "workaround_")]  # noqa: E731
    failed = lambda what: [sum(isinstance(x, str) for x in adds(pre, what)[0]) if ran(pre) else None  # noqa: E731
                           for pre in ("", "workaround_")]

    def found(pre):
        per = (tt or {}).get(pre + "self_retrieval_per_add")
        if per is None:
            return None
        return f"{sum(x['found_top10'] for x in per)}/{sum(x['checked'] for x in per)} ({len(per)} adds checked)"

    rows += [
        row("twenty_adds", "mean add_s", round(float(np.mean(ot["add_seconds"])), 3) if ot.get("add_seconds") else None,
            *both("add")),
        row("twenty_adds", "mean persist_s", "- (on disk when add returns)", *both("persist")),
        row("twenty_adds", "failed adds of 20", 0, *failed("add")),
        row("twenty_adds", "nDCG@10 after the adds (ours: compacted)", (ot.get("quality_compacted") or {}).get("ndcg@10"),
            *[f"{x} ({f} of 20 adds failed)" if f and isinstance(x, float) else x for x, f in
              zip([step_fig(tt, pre + "search_after_adds", "ndcg@10") for pre in ("", "workaround_")],
                  failed("add"), strict=True)]),
        row("twenty_adds", "added documents found by their own text in the top 10 (5 per add, found/sampled)", None,
            found(""), found("workaround_")),
        row("twenty_adds", "nDCG@10 fresh build of the same documents",
            (ot.get("quality_fresh_build") or {}).get("ndcg@10"), step_fig(tt, "search_fresh", "ndcg@10")),
        row("twenty_adds", "fresh build_s", ot.get("fresh_build_s"), step_fig(tt, "build_fresh")),
    ]
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scifact")
    p.add_argument("--max-docs", type=int, default=None, help="a subset (judged documents kept) for a quick run")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--doc-max-length", type=int, default=180)
    p.add_argument("--query-max-length", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=("embedctl", "kit"), default="embedctl",
                   help="embedctl: our lifecycle encoder exported (same weights); kit: the peer kit's shared model")
    p.add_argument("--only", default=",".join(EXPERIMENTS), help="experiments (delete needs full: run with it)")
    p.add_argument("--peers-work", type=Path, default=DEFAULT_PEERS, help="the folder given to ../shared/peers/setup.sh")
    p.add_argument("--ours", type=Path, default=None, help="our lifecycle.json (default: this machine kind's latest)")
    p.add_argument("--worker-timeout", type=int, default=3 * 3600)
    p.add_argument("--note", default="2-core host shared with other jobs (run under nice -n 19): timings are upper bounds")
    p.add_argument("--out")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--reuse", type=Path, default=None,
                   help="the work folder of an earlier --keep run: an experiment whose result-<name>.json is there is "
                        "taken as it is (as far as its worker got; delete the file to rerun it), the others run")
    args = p.parse_args()
    todo = set(args.only.split(","))
    if "delete" in todo:
        todo.add("full")
    python = args.peers_work / "peers-work" / "venv-colbert" / "bin" / "python"
    (REPO / "bench" / "work").mkdir(parents=True, exist_ok=True)
    reuse = args.reuse is not None
    work = args.reuse.resolve() if reuse else Path(tempfile.mkdtemp(prefix="bench_lifecycle_colbertai_", dir=REPO / "bench" / "work"))
    b = Bench(SimpleNamespace(scifact=args.scifact, queries=args.queries, max_docs=args.max_docs,
                              doc_max_length=args.doc_max_length, threads=1), work)
    qrels = find_scifact(args.scifact) / "qrels" / "test.tsv"
    n = len(b.docs)
    ours_path = args.ours or latest_path("lifecycle")
    ours = json.loads(ours_path.read_text()) if ours_path.is_file() else None
    result: dict = {
        "system": "colbert-ai 0.2.22 (Indexer, Searcher, IndexUpdater) through ../shared/peers' colbert venv",
        "num_docs": n, "queries": len(b.queries), "smoke": bool(args.max_docs),
        "settings": {"nbits": 2, "doc_maxlen": args.doc_max_length, "query_maxlen": args.query_max_length,
                     "kmeans_niters": 4, "nranks": 1, "search_k": 100,
                     "search_params": {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 1024}},
        "sequence": "bench_lifecycle.py's: same documents and order, halves, seed-0 20% minus judged, delete-cost ids, "
                    "20 adds of 1% on an 80% build",
        "ours_source": str(ours_path.relative_to(REPO)) if ours else f"{ours_path} missing: no side-by-side",
        "comparability": [
            "ours searched with PLAID k=10 (embedctl search defaults), colbert-ai at k=100 with its k=100 settings; "
            "nDCG@10 is taken from each ranking's top 10",
            "ours from lifecycle.json (its own run, its own host load; see its note); colbert-ai timed here",
            "each system's deltas are against its own full build / fresh build",
        ],
        "note": args.note,
    }
    if not python.exists():
        result["colbert_ai"] = f"not run: {python} missing (../shared/peers/setup.sh {args.peers_work})"
        write_result("lifecycle_colbertai", result, args.out)
        return
    if args.model == "embedctl":
        ckpt, result["model"] = export_model(b, work, python)
    else:
        ckpt = args.peers_work / "peers-work" / "minilm-colbert-ai"
        result["model"] = {"source": f"the peer kit's shared model {ckpt} (PyLate seed-0 projection): not the encoder "
                                     "of our lifecycle.json, compare deltas only"}
        if not ckpt.is_dir():
            result["colbert_ai"] = f"not run: {ckpt} missing (the kit's build_model.py + convert_to_colbert_ai.py)"
            write_result("lifecycle_colbertai", result, args.out)
            return
    if args.max_docs:
        result["comparability"].append(f"quick run over {n} documents: ours are full SciFact figures, not comparable")
    if ours and ours.get("num_docs") != n:
        result["comparability"].append(f"ours ran on {ours.get('num_docs')} documents, colbert-ai here on {n}")

    # the inputs, and the same sequence bench_lifecycle.py runs (its lines, in its order)
    texts = [clean(f"{d.get('title') or ''} {d['text']}") for d in b.docs]
    (work / "texts.json").write_text(json.dumps(texts))
    (work / "ids.json").write_text(json.dumps([d["_id"] for d in b.docs]))
    (work / "queries.json").write_text(json.dumps([[q, clean(t)] for q, t in b.queries]))
    rng = np.random.default_rng(args.seed)
    judged = {d for q in b.qrels.values() for d in q}
    chosen = rng.choice(n, size=n // 5, replace=False)
    gone = sorted({b.docs[i]["_id"] for i in chosen} - judged)
    cost = [(count, rng.choice(n, size=min(count, n), replace=False).tolist()) for count in (1, 100, 10_000)]
    pos = {d["_id"]: i for i, d in enumerate(b.docs)}
    base_n, step = int(0.8 * n), max(1, n // 100)
    parts = [list(range(base_n + i * step, min(n, base_n + (i + 1) * step))) for i in range(20)]
    parts = [x for x in parts if x]
    common = {"texts": str(work / "texts.json"), "ids": str(work / "ids.json"), "queries": str(work / "queries.json"),
              "root": str(work / "experiments"), "checkpoint": str(ckpt), "nbits": 2,
              "doc_maxlen": args.doc_max_length, "query_maxlen": args.query_max_length}
    theirs: dict = {}
    t0 = time.perf_counter()
    if "full" in todo:
        theirs["full"] = run_worker(python, work, {**common, "experiment": "full", "all": list(range(n))},
                                    args.worker_timeout, reuse)
    if "add" in todo:
        for frac in (0.5, 0.9):
            first = int(round(frac * n))
            tag = f"add_{int(frac * 100)}"
            theirs[tag] = run_worker(python, work, {**common, "experiment": "add", "tag": tag,
                                                    "base": list(range(first)), "added": list(range(first, n))},
                                     args.worker_timeout, reuse)
            theirs[tag]["built_docs"], theirs[tag]["added_docs"] = first, n - first
    if "delete" in todo:
        full_index = (theirs.get("full") or {}).get("index")
        if not full_index:
            theirs["delete"] = {"steps": {}, "skipped": "colbert-ai's full build failed: nothing to delete from"}
        else:
            gone_set = set(gone)
            theirs["delete"] = run_worker(python, work, {
                **common, "experiment": "delete", "full_index": full_index, "all": list(range(n)),
                "gone_pids": [pos[d] for d in gone], "without": [i for i, d in enumerate(b.docs) if d["_id"] not in gone_set],
                "cost": [(count, ids, count <= 100) for count, ids in cost]}, args.worker_timeout, reuse)
            theirs["delete"]["deleted"] = len(gone)
    if "twenty" in todo:
        theirs["twenty"] = run_worker(python, work, {
            **common, "experiment": "twenty", "base": list(range(base_n)), "parts": parts,
            "same_docs": list(range(min(n, base_n + 20 * step)))}, args.worker_timeout, reuse)
        theirs["twenty"].update({"base_docs": base_n, "adds": len(parts), "docs_per_add": step})
    result["colbert_ai_wall_s"] = round(time.perf_counter() - t0, 1)
    reused = [k for k, v in theirs.items() if "reused_from" in v]
    if reused:  # their workers ran earlier: the wall time of this run says nothing; each step has its seconds
        result["colbert_ai_wall_s"] = None
        result["reused_experiments"] = reused

    for out in theirs.values():
        evaluate_searches(out, qrels)
    full_ndcg = step_fig(theirs.get("full"), "search", "ndcg@10")
    for tag in ("add_50", "add_90", "delete"):
        st = (theirs.get(tag) or {}).get("steps", {})
        for pre in ("", "workaround_"):  # #261: the same searcher state in memory and after persist_to_disk
            agree = top10_agreement(*[(st.get(pre + k) or {}).get("_run")
                                      for k in ("search_in_memory", "search_after_persist")])
            if agree:
                theirs[tag][pre + "in_memory_vs_after_persist_top10"] = agree
            for k in ("search_in_memory", "search_after_persist"):
                ndcg = (st.get(pre + k) or {}).get("ndcg@10")
                if isinstance(ndcg, float) and isinstance(full_ndcg, float) and tag != "delete":
                    st[pre + k]["delta_ndcg@10_vs_full"] = round(ndcg - full_ndcg, 4)
    for out in theirs.values():
        out.pop("index", None)  # a path in the deleted work folder
        for st in out.get("steps", {}).values():
            st.pop("_run", None)
    result["colbert_ai"] = theirs
    result["failures"] = [{"experiment": e, "step": k, "error": v.get("error")}
                          for e, out in theirs.items() for k, v in out.get("steps", {}).items() if v.get("ok") is False]
    result["failures"] += [{"experiment": e, "worker_returncode": out["worker_returncode"],
                            "log_tail": out.get("worker_log_tail", "")[-800:]}
                           for e, out in theirs.items() if "worker_returncode" in out]
    result["side_by_side"] = side_by_side(ours, theirs, n)
    default_out = REPO / "bench" / "work" / "lifecycle_colbertai_smoke.json" if args.max_docs else None
    write_result("lifecycle_colbertai", result, args.out or default_out)
    if not (args.keep or args.reuse):
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder kept: {work}", flush=True)


if __name__ == "__main__":
    main()
