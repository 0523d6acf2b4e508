"""Hybrid search on full SciFact, per neural system: ``python bench/bench_hybrid.py [--only zero_shot,...]``.

Three systems, each a full-SciFact index (5,183 documents) with its lexical side (BM25, bm25s), built
through the public API (embedctl.Index.build) from the shipped recipes:

- ``zero_shot``: the bundled minilm, dense (configs/minilm_scifact.yaml, untrained);
- ``dense``: minilm fine-tuned by configs/minilm_scifact.yaml (``--dense``, a ``final`` checkpoint folder);
- ``colbert``: the ColBERT trained by configs/colbert_scifact.yaml, PLAID nbits 2 (``--colbert``).

Both trained models trained on 609 of the 809 SciFact train queries (prebatch.qrels = the train-fit part of
bench/benchdata.py's train_split: 200 held out, random.Random(42)). The fusion settings of each system
(search.fusion rrf | score, search.hybrid_weight 0.1..0.9, search.fusion_depth 20/50/100; rrf_k 60) are
chosen on those 200 held-out train queries, from each side's top 100 (``Index.search(mode="neural")`` and
``mode="lexical"``) fused with embedctl.search.fusion.fuse, the function ``search.mode=hybrid`` runs. Then
on the 300 test queries: nDCG@10 of neural alone, BM25 alone, and hybrid with the chosen settings through
``Index.search(k=10, mode="hybrid")`` itself (the product path; its top 10 checked against the offline
fusion: equal but for ties, which break by pid, and PLAID, whose search at k=fusion_depth may differ a little
from the top fusion_depth of its k=100 search), with the
difference to the best single system (the target: >= +0.01 for the trained models), and every grid
setting's test figure beside it (for the defaults question). An index already under ``--work`` is reused
(``--rebuild`` builds again).

Writes bench/results/<machine kind>/hybrid.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from benchdata import HELD_OUT_QUERIES, HELD_OUT_SEED, find_scifact, queries_of, train_split
from machine import machine_kind
from resultfiles import latest_path, write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402
from embedctl.search.fusion import fuse  # noqa: E402

DEPTH = 100
WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEPTHS = (20, 50, 100)
RRF_K = 60
DENSE_CFG, COLBERT_CFG = REPO / "configs" / "minilm_scifact.yaml", REPO / "configs" / "colbert_scifact.yaml"


def systems(args) -> dict[str, tuple[Path, list[str]]]:
    """name -> (config, overrides) of its index."""
    return {"zero_shot": (DENSE_CFG, []),
            "dense": (DENSE_CFG, [f"model.name_or_path={args.dense}"]),
            "colbert": (COLBERT_CFG, [f"model.name_or_path={args.colbert}"])}


def ndcg(rankings: dict[str, list], qrels: dict) -> float:
    run = {q: {d: float(s) for d, s in hits} for q, hits in rankings.items()}
    return round(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"], 4)


class Ids:
    """Document ids <-> ints, for embedctl.search.fusion (which ranks int64 pids)."""

    def __init__(self):
        self.num: dict[str, int] = {}
        self.names: list[str] = []

    def ranking(self, hits) -> tuple[np.ndarray, np.ndarray]:
        for h in hits:
            if h.id not in self.num:
                self.num[h.id] = len(self.names)
                self.names.append(h.id)
        return (np.array([self.num[h.id] for h in hits], np.int64), np.array([h.score for h in hits], np.float32))

    def hits(self, ranking) -> list[tuple[str, float]]:
        return [(self.names[p], float(s)) for p, s in zip(ranking[0].tolist(), ranking[1].tolist(), strict=True)]


def sides(idx, qids: list[str], texts: list[str], ids: Ids) -> dict[str, dict[str, tuple]]:
    """Each side's top DEPTH per query: {"neural": {qid: ranking}, "lexical": {...}} (and seconds)."""
    out: dict = {}
    for mode in ("neural", "lexical"):
        t = time.perf_counter()
        ranked = idx.search(texts, k=DEPTH, text=False, mode=mode)
        out[mode] = {q: ids.ranking(h) for q, h in zip(qids, ranked, strict=True)}
        out[f"{mode}_s"] = round(time.perf_counter() - t, 2)
    return out


def fused(side: dict, setting: dict, ids: Ids, k: int = DEPTH) -> dict[str, list]:
    d = setting["fusion_depth"]
    return {q: ids.hits(fuse((n[0][:d], n[1][:d]), (lx[0][:d], lx[1][:d]), setting["fusion"],
                             setting["hybrid_weight"], RRF_K, k))
            for (q, n), lx in zip(side["neural"].items(), side["lexical"].values(), strict=True)}


def grid() -> list[dict]:
    return [{"fusion": f, "hybrid_weight": w, "fusion_depth": d, "rrf_k": RRF_K}
            for f in ("rrf", "score") for d in DEPTHS for w in WEIGHTS]


def label(s: dict) -> str:
    return f"{s['fusion']}@w{s['hybrid_weight']}@d{s['fusion_depth']}"


def open_or_build(name: str, cfg: Path, overrides: list[str], scifact: Path, work: Path, rebuild: bool):
    path = work / name
    if path.is_dir() and not rebuild:
        try:
            return embedctl.Index.open(path, config=cfg, overrides=overrides), {"reused": str(path)}
        except embedctl.errors.EmbedctlError as err:  # an unfinished build: build it again
            print(f"{name}: {err}; building", flush=True)
    t = time.perf_counter()
    idx = embedctl.Index.build(scifact / "corpus.jsonl", path, config=cfg, overrides=overrides, overwrite=True)
    timings = idx.summary["metadata"]["timings"]
    return idx, {"seconds": round(time.perf_counter() - t, 1), "lexical_s": timings.get("lexical_s")}


def measure(name: str, cfg: Path, overrides: list[str], scifact: Path, args) -> dict:
    idx, build = open_or_build(name, cfg, overrides, scifact, args.work, args.rebuild)
    print(name, "index", json.dumps(build), flush=True)
    fit, held = train_split(scifact)
    tq_all, tt_all, tqrels = queries_of(scifact, "train")
    keep = set(held)
    tqrels = {q: r for q, r in tqrels.items() if q in keep}  # the mean is over the held-out queries alone
    tq = [q for q in tq_all if q in keep]
    tt = [t for q, t in zip(tq_all, tt_all, strict=True) if q in keep]
    ids = Ids()
    train_side = sides(idx, tq, tt, ids)
    settings = grid()
    for s in settings:
        s["heldout_ndcg@10"] = ndcg(fused(train_side, s, ids), tqrels)
    chosen = max(settings, key=lambda s: s["heldout_ndcg@10"])  # ties: the first in grid order
    qids, texts, qrels = queries_of(scifact, "test")
    test_side = sides(idx, qids, texts, ids)
    neural = ndcg({q: ids.hits(r) for q, r in test_side["neural"].items()}, qrels)
    lexical = ndcg({q: ids.hits(r) for q, r in test_side["lexical"].items()}, qrels)
    by_setting = {label(s): ndcg(fused(test_side, s, ids), qrels) for s in settings}
    keys = [f"search.{k}={chosen[k]}" for k in ("fusion", "hybrid_weight", "fusion_depth", "rrf_k")]
    product = embedctl.Index.open(idx.path, config=cfg, overrides=[*overrides, *keys], encoder=idx.encoder)
    t = time.perf_counter()
    # k=10: each side's top search.fusion_depth (max(k, depth)) fused, as a user's search for 10 hits runs it
    hybrid_hits = product.search(texts, k=10, text=False, mode="hybrid")
    hybrid_s = round(time.perf_counter() - t, 2)
    hybrid = ndcg({q: [(h.id, h.score) for h in hits] for q, hits in zip(qids, hybrid_hits, strict=True)}, qrels)
    offline = fused(test_side, chosen, ids)
    same_top10 = sum([d for d, _ in offline[q][:10]] == [h.id for h in hits[:10]]
                     for q, hits in zip(qids, hybrid_hits, strict=True)) / len(qids)
    best_single = max(neural, lexical)
    default = {"fusion": "rrf", "hybrid_weight": 0.5, "fusion_depth": 100, "rrf_k": RRF_K}
    out = {"config": str(cfg.relative_to(REPO)), "overrides": overrides, "build": build, "docs": len(idx),
           "heldout_queries": len(tq), "test_queries": len(qids),
           "chosen": {k: chosen[k] for k in ("fusion", "hybrid_weight", "fusion_depth", "rrf_k", "heldout_ndcg@10")},
           "heldout_neural_ndcg@10": ndcg({q: ids.hits(r) for q, r in train_side["neural"].items()}, tqrels),
           "heldout_lexical_ndcg@10": ndcg({q: ids.hits(r) for q, r in train_side["lexical"].items()}, tqrels),
           "neural_ndcg@10": neural, "lexical_ndcg@10": lexical, "hybrid_ndcg@10": hybrid,
           "hybrid_minus_best_single": round(hybrid - best_single, 4),
           "best_single": "neural" if neural >= lexical else "lexical",
           "hybrid_ndcg@10_offline_fusion": by_setting[label(chosen)],
           "hybrid_top10_equal_offline_fusion": round(same_top10, 4),
           "default_setting_ndcg@10": by_setting[label(default)], "default_setting": default,
           "best_test_setting": max(by_setting, key=by_setting.get), "best_test_ndcg@10": max(by_setting.values()),
           "test_seconds": {"neural": test_side["neural_s"], "lexical": test_side["lexical_s"], "hybrid": hybrid_s},
           "grid_heldout": {label(s): s["heldout_ndcg@10"] for s in settings}, "grid_test": by_setting}
    print(name, json.dumps({k: v for k, v in out.items() if not k.startswith("grid")}), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--dense", type=Path, default=Path("/work/trained/dense/final"),
                    help="the fine-tuned dense checkpoint (configs/minilm_scifact.yaml's final)")
    ap.add_argument("--colbert", type=Path, default=Path("/work/trained/colbert/final"),
                    help="the trained ColBERT checkpoint (configs/colbert_scifact.yaml's final)")
    ap.add_argument("--only", default="zero_shot,dense,colbert", help="systems to measure, comma-separated")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "hybrid")
    ap.add_argument("--rebuild", action="store_true", help="build the indexes again even if --work holds them")
    ap.add_argument("--merge", action="store_true", help="keep the systems of --out that this run does not measure")
    ap.add_argument("--host", default="loaded (shared 2-core machine)", help="how busy the host was, for the record")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/hybrid.json)")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict = {"host": args.host, "python": platform.python_version(),
                    "split": {"heldout_queries": HELD_OUT_QUERIES, "seed": HELD_OUT_SEED,
                              "how": "bench/benchdata.py train_split: random.Random(42).sample of the 809 judged "
                                     "SciFact train queries; the trained models saw only the other 609"},
                    "grid": {"fusion": ["rrf", "score"], "hybrid_weight": list(WEIGHTS), "fusion_depth": list(DEPTHS),
                             "rrf_k": RRF_K, "side_depth": DEPTH},
                    "systems": {}}
    table = systems(args)
    for name in args.only.split(","):
        cfg, overrides = table[name]
        measured = measure(name, cfg, overrides, scifact, args)
        measured["measured"] = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        result["systems"][name] = measured
    previous = Path(args.out) if args.out else latest_path("hybrid", machine_kind())
    if args.merge and previous.is_file():  # read at the end: runs of other systems may have finished meanwhile
        kept = json.loads(previous.read_text(encoding="utf-8"))["systems"]
        result["systems"] = {**{k: v for k, v in kept.items() if k not in result["systems"]}, **result["systems"]}
    write_result("hybrid", result, args.out)


if __name__ == "__main__":
    main()
