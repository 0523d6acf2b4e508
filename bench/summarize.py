"""Generate bench/RESULTS.md: the key figures of every latest result, one column per machine kind.

    python bench/summarize.py            # rewrite bench/RESULTS.md from bench/results/<machine-kind>/*.json
    python bench/summarize.py --check    # exit 1 when bench/RESULTS.md is not what the results give

Run by `make bench` (at the end of bench/run_all.py) and by `make docs`. Each section shows one benchmark;
each cell comes from that machine kind's latest file, with its date, commit and command underneath. A figure
that a result lacks shows as "-".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from resultfiles import BENCH, BENCHMARKS, RESULTS, kinds, load
from summary_api import api_rows, cold_start_rows
from summary_checks import read_checks_rows
from summary_common import Row, dig, num, pair, pct
from summary_encoder import bf16_attention_rows, build_rest_rows, encoder_rows, search_precision_rows
from summary_lifecycle import delete_seeds_rows, grow_rows, lifecycle_colbertai_rows, lifecycle_rows

OUT = BENCH / "RESULTS.md"


def model_name(path: str | None) -> str | None:
    return None if not path else path.rstrip("/").rsplit("/", 1)[-1]


# ------------------------------------------------------------------ peers beside ours --------------------
def colbertai_retrieval_p50(peers: dict | None, k: int, threads: int = 1) -> float | None:
    """colbert-ai's retrieval p50: its end-to-end median minus its query-encoding median (it encodes inside)."""
    runs = dig(peers, "results", "colbertai_search", "runs")
    e2e = dig(runs, f"threads{threads}_k{k}", "latency_end_to_end", "median_ms")
    enc = dig(runs, f"threads{threads}_query_encode", "median_ms")
    return None if e2e is None or enc is None else round(e2e - enc, 2)


def colbertai_index(peers: dict | None) -> str | None:
    wall = dig(peers, "results", "colbertai_index", "indexing_wall_s")
    return pair(wall, dig(peers, "steps", "colbertai_index", "peak_rss_mb"), 1) if wall is not None else None


# ------------------------------------------------------------------ sections ------------------------------
def plaid_rows() -> list[Row]:
    def run(r, k, *keys):
        return dig(r, "search", "runs", f"threads1_k{k}", *keys)

    return [
        ("model", lambda r, o: model_name(r.get("model"))),
        ("precision (as the searcher reports it)", lambda r, o: dig(r, "search", "precision")),
        ("index: encode / rest, s", lambda r, o: pair(dig(r, "index", "encode_s"), dig(r, "index", "rest_s"), 1)),
        ("index: rest / encode (target < 10%)", lambda r, o: pct(dig(r, "index", "rest_over_encode"))),
        ("bytes / vector", lambda r, o: num(dig(r, "index", "bytes_per_vector"))),
        ("index peak RSS, MB", lambda r, o: num(dig(r, "index", "peak_rss_mb"), 1)),
        ("search p50, 1 thread, k=10 / k=100 (retrieval), ms",
         lambda r, o: pair(run(r, 10, "retrieval", "p50_ms"), run(r, 100, "retrieval", "p50_ms"))),
        ("query encoding p50, 1 thread, ms", lambda r, o: num(dig(r, "search", "runs", "threads1_query_encode", "p50_ms"))),
        ("nDCG@10 at k=10 / k=100", lambda r, o: pair(run(r, 10, "nDCG@10"), run(r, 100, "nDCG@10"), 4)),
        ("nDCG@10 vs exhaustive MaxSim, k=10 (target >= 99.5%)", lambda r, o: pct(run(r, 10, "nDCG@10_vs_exhaustive"))),
        ("colbert-ai (peers.json): model", lambda r, o: model_name(dig(o.get("peers"), "shared_model"))),
        ("colbert-ai: index wall s / peak RSS MB", lambda r, o: colbertai_index(o.get("peers"))),
        ("colbert-ai: search p50, 1 thread, k=10 / k=100 (retrieval), ms",
         lambda r, o: pair(colbertai_retrieval_p50(o.get("peers"), 10), colbertai_retrieval_p50(o.get("peers"), 100))),
        ("colbert-ai: nDCG@10 at k=10 / k=100",
         lambda r, o: pair(dig(o.get("peers"), "results", "colbertai_search", "runs", "threads1_k10", "ndcg@10"),
                           dig(o.get("peers"), "results", "colbertai_search", "runs", "threads1_k100", "ndcg@10"), 4)),
    ]


def index_runs_rows() -> list[Row]:
    def gauge(run: dict):
        return next((v for k, v in run.items() if k.startswith("query_encode_p50_ms")), None)

    def each(r, key):
        return ", ".join(num(x.get(key)) or "-" for x in r.get("runs", [])) or None

    return [
        ("runs", lambda r, o: len(r.get("runs", [])) or None),
        ("rest / encode, each run", lambda r, o: ", ".join(pct(x.get("rest_over_encode")) or "-" for x in r.get("runs", []))),
        ("query encoding p50 ms, each run (host load gauge)",
         lambda r, o: ", ".join(num(gauge(x)) or "-" for x in r.get("runs", []))),
        ("encode s, each run", lambda r, o: each(r, "encode_s")),
        ("peak RSS MB, each run", lambda r, o: each(r, "peak_rss_mb")),
    ]


def stages_rows() -> list[Row]:
    stages = (("centroid_scores", "centroid scores"), ("candidates", "candidates"), ("pruned", "pruned interaction"),
              ("full", "full interaction"), ("rank", "final MaxSim"), ("total", "total"))
    rows: list[Row] = [("precision", lambda r, o: r.get("precision"))]
    for key, label in stages:
        rows.append((f"{label}, k=10 / k=100, ms",
                     lambda r, o, key=key: pair(dig(r, "stages_ms", "k10", key), dig(r, "stages_ms", "k100", key), 3)))
    rows.append(("candidates per query, k=10 / k=100",
                 lambda r, o: pair(dig(r, "stages_ms", "k10", "mean_candidates"), dig(r, "stages_ms", "k100", "mean_candidates"))))
    return rows


def search_floor_rows() -> list[Row]:
    def p50(tree, key):
        return lambda r, o: pair(dig(r, "trees", tree, "k10" + key, "p50_ms"), dig(r, "trees", tree, "k100" + key, "p50_ms"), 3)

    def ratio(key):
        return lambda r, o: pair(dig(r, "vs_baseline", "k10", key), dig(r, "vs_baseline", "k100", key), 3)

    return [("search only p50 wall, k=10 / k=100, ms", p50("this", "")),
            ("the same, each query on 2 threads (search.query_threads=2), ms", p50("this_t2", "")),
            ("search only p50 thread CPU, k=10 / k=100, ms", p50("this", "_cpu")),
            ("baseline p50 thread CPU, k=10 / k=100, ms", p50("baseline", "_cpu")),
            ("p50 ratio to the baseline, wall", ratio("p50_ratio")),
            ("p50 ratio to the baseline, thread CPU", ratio("cpu_p50_ratio")),
            ("same pids and scores as the baseline, k=10 / k=100", lambda r, o: " / ".join(
                "yes" if r["vs_baseline"][k]["same_pids"] and r["vs_baseline"][k]["max_score_diff"] == 0 else "no"
                for k in ("k10", "k100"))),
            ("load average at the start", lambda r, o: round(r["loadavg_start"][0], 1))]


def seeds_rows(results: list[dict]) -> list[Row]:
    keys = list(dict.fromkeys(k for r in results for k in r.get("mean_nDCG@10", {})))
    rows: list[Row] = [("model", lambda r, o: model_name(r.get("model"))),
                       ("seeds", lambda r, o: ", ".join(s.removeprefix("seed") for s in r.get("runs", {})) or None)]
    for key in keys:
        prec, k = key.split("_k")
        rows.append((f"mean nDCG@10, {prec} MaxSim, k={k}", lambda r, o, key=key: num(dig(r, "mean_nDCG@10", key), 4)))
    return rows


def compare_rows() -> list[Row]:
    def ratios(r, name, field):
        vals = [dig(x, "runs", name, field) for x in r.get("rounds", [])]
        return ", ".join(f"{v:.2f}x" for v in vals if v is not None) or None

    rows: list[Row] = [("rounds", lambda r, o: len(r.get("rounds", [])) or None)]
    for threads in (1, 2):
        for k in (10, 100):
            name = f"threads{threads}_k{k}"
            rows.append((f"retrieval ratio embedctl / colbert-ai, {threads} thread(s), k={k} (target <= 0.5x)",
                         lambda r, o, name=name: ratios(r, name, "ratio_retrieval")))
            rows.append((f"end-to-end ratio, {threads} thread(s), k={k} (target <= 0.8x)",
                         lambda r, o, name=name: ratios(r, name, "ratio_end_to_end")))
    return rows


def peers_rows() -> list[Row]:
    return [
        ("shared model", lambda r, o: model_name(r.get("shared_model"))),
        ("colbert-ai: index wall s / peak RSS MB", lambda r, o: colbertai_index(r)),
        ("colbert-ai: search p50, 1 thread, k=10 / k=100 (retrieval), ms",
         lambda r, o: pair(colbertai_retrieval_p50(r, 10), colbertai_retrieval_p50(r, 100))),
        ("colbert-ai: nDCG@10 at k=10 / k=100",
         lambda r, o: pair(dig(r, "results", "colbertai_search", "runs", "threads1_k10", "ndcg@10"),
                           dig(r, "results", "colbertai_search", "runs", "threads1_k100", "ndcg@10"), 4)),
        ("PyLate (fast-plaid, nbits 4): build s", lambda r, o: num(dig(r, "results", "pylate_plaid_nbits4", "build_s"), 1)),
        ("sentence-transformers dense: nDCG@10", lambda r, o: num(dig(r, "results", "dense_minilm", "ndcg@10"), 4)),
        ("notes", lambda r, o: "; ".join(r.get("notes", [])) or None),
    ]


def dense_rows() -> list[Row]:
    def latency(r, k):
        return next((x["retrieval"]["p50_ms"] for x in r.get("latency", []) if x.get("threads") == 1 and x.get("k") == k), None)

    def rest(r):
        wall, enc = dig(r, "index", "wall_s"), dig(r, "index", "encode_s")
        return None if wall is None or enc is None else round(wall - enc, 2)

    return [
        ("smoke run (not comparable)", lambda r, o: "yes" if r.get("smoke") else None),
        ("nDCG@10 (target 0.645 +/- 0.003)", lambda r, o: num(dig(r, "metrics", "nDCG@10"), 4)),
        ("Recall@100", lambda r, o: num(dig(r, "metrics", "Recall@100"), 4)),
        ("index: encode / rest, s", lambda r, o: pair(dig(r, "index", "encode_s"), rest(r), 1)),
        ("index: rest / encode",
         lambda r, o: pct(rest(r) / r["index"]["encode_s"]) if rest(r) is not None and r["index"]["encode_s"] else None),
        ("search p50, 1 thread, k=10 / k=100 (retrieval), ms", lambda r, o: pair(latency(r, 10), latency(r, 100))),
        ("sentence-transformers dense (peers.json): nDCG@10",
         lambda r, o: num(dig(o.get("peers"), "results", "dense_minilm", "ndcg@10"), 4)),
        ("conditions", lambda r, o: r.get("conditions")),
    ]


def pretokenize_rows() -> list[Row]:
    return [
        ("tokens/s: embedctl pretokenize / raw tokenizers",
         lambda r, o: pair(dig(r, "embedctl_pretokenize", "tokens_per_s"), dig(r, "raw_tokenizers", "tokens_per_s"))),
        ("ratio (target >= 0.9x)", lambda r, o: num(r.get("ratio"), 3, "x")),
        ("workers / cores", lambda r, o: pair(r.get("workers"), r.get("cores"))),
        ("ColBERT documents at 180: embedctl (prefixes) / whole texts, s",
         lambda r, o: None if "truncated_documents" not in r else
         f"{pair(dig(r, 'truncated_documents', 'embedctl_s'), dig(r, 'truncated_documents', 'whole_texts_s'))} "
         f"({dig(r, 'truncated_documents', 'ratio')}x; same ids: {dig(r, 'truncated_documents', 'same_ids')})"),
    ]


def train_rows() -> list[Row]:
    def ndcg(key):
        return lambda r, o: num(dig(r, key, "nDCG@10"), 4)

    return [
        ("settings: steps x queries, lr, doc tokens",
         lambda r, o: "{steps} x {batch}, {lr}, {max_length}".format(**r["settings"]) if "settings" in r else None),
        ("nDCG@10 zero-shot", ndcg("zero_shot")),
        ("nDCG@10 embedctl, in-batch negatives", ndcg("embedctl")),
        ("nDCG@10 embedctl, + mined hard negatives (target >= 0.70)", ndcg("embedctl_hard_negatives")),
        ("nDCG@10 sentence-transformers MNRL", ndcg("sentence_transformers_mnrl")),
        ("pairs/s embedctl / sentence-transformers",
         lambda r, o: pair(dig(r, "embedctl", "pairs_per_s"),  # both without their first step where recorded
                           dig(r, "sentence_transformers_mnrl", "examples_per_s_after_first_step")
                           or dig(r, "sentence_transformers_mnrl", "examples_per_s"))),
        ("throughput ratio (target >= 1.2x)", lambda r, o: num(r.get("speedup"), 2, "x")),
    ]


def train_speed_rows() -> list[Row]:
    return [
        ("runs", lambda r, o: len(r.get("runs", [])) or None),
        ("median pairs/s embedctl / sentence-transformers",
         lambda r, o: pair(dig(r, "median", "embedctl_pairs_per_s"), dig(r, "median", "st_pairs_per_s"))),
        ("throughput ratio (target >= 1.2x)", lambda r, o: num(r.get("speedup"), 2, "x")),
        ("ratio of each run", lambda r, o: ", ".join(
            f"{x['embedctl_pairs_per_s'] / x['st_pairs_per_s']:.2f}x" for x in r.get("runs", [])
            if x.get("st_pairs_per_s")) or None),
    ]


def by_seed(r: dict, name: str, search: str) -> str | None:
    """'42: 0.7571, 1: 0.7403 (mean 0.7487)': nDCG@10 of a bench_colbert step and its --train-seed repeats."""
    seeds = {"42": dig(r, name, search, "nDCG@10")}
    seeds.update({k[len(name) + 2:]: dig(r, k, search, "nDCG@10") for k in r if k.startswith(name + "_s")})
    seeds = {k: v for k, v in seeds.items() if v is not None}
    if len(seeds) < 2:
        return None
    cells = ", ".join(f"{k}: {v:.4f}" for k, v in seeds.items())
    return f"{cells} (mean {sum(seeds.values()) / len(seeds):.4f})"


def colbert_rows() -> list[Row]:
    """bench_colbert.py: each trained model's nDCG@10 (PLAID, or the exact dense index) and training speed."""
    def ndcg(key):
        return lambda r, o: num(dig(r, key, "plaid", "nDCG@10") or dig(r, key, "exact", "nDCG@10"), 4)

    def ratio(r, o):
        ours, theirs = dig(r, "colbert_infonce", "queries_per_s"), dig(r, "pylate_contrastive", "queries_per_s")
        return num(ours / theirs, 2, "x") if ours and theirs else None

    return [
        ("settings: steps x queries, lr, InfoNCE temperature",
         lambda r, o: f"{r.get('steps')} x {r.get('queries_per_batch')}, {r.get('lr')}, {r.get('temperature')}"),
        ("nDCG@10 our dense, fine-tuned (exact index)", ndcg("dense")),
        ("nDCG@10 our ColBERT InfoNCE, PLAID (target >= 0.70 and > dense)", ndcg("colbert_infonce")),
        ("nDCG@10 our ColBERT InfoNCE, exhaustive MaxSim",
         lambda r, o: num(dig(r, "colbert_infonce", "exhaustive_maxsim", "nDCG@10"), 4)),
        ("nDCG@10 our ColBERT distillation, PLAID", ndcg("colbert_distill")),
        ("nDCG@10 our ColBERT InfoNCE + distillation, PLAID", ndcg("colbert_infonce_distill")),
        ("nDCG@10 PyLate Contrastive / Distillation, PLAID",
         lambda r, o: pair(dig(r, "pylate_contrastive", "plaid", "nDCG@10"),
                           dig(r, "pylate_distillation", "plaid", "nDCG@10"), 4)),
        ("train queries/s ours InfoNCE / PyLate Contrastive",
         lambda r, o: pair(dig(r, "colbert_infonce", "queries_per_s"), dig(r, "pylate_contrastive", "queries_per_s"))),
        ("throughput ratio (target >= 1.2x)", ratio),
        ("nDCG@10 by train seed (mean), our dense, exact index", lambda r, o: by_seed(r, "dense", "exact")),
        ("nDCG@10 by train seed (mean), our ColBERT InfoNCE, PLAID", lambda r, o: by_seed(r, "colbert_infonce", "plaid")),
        ("nDCG@10 by train seed (mean), PyLate Contrastive, PLAID", lambda r, o: by_seed(r, "pylate_contrastive", "plaid")),
        ("train seed 1 repeat: queries/s ours / PyLate",
         lambda r, o: pair(dig(r, "colbert_infonce_s1", "queries_per_s"), dig(r, "pylate_contrastive_s1", "queries_per_s"))),
        ("conditions", lambda r, o: r.get("note")),
    ]


def backends_rows(results: list[dict]) -> list[Row]:
    """One row per (backend, computation) seen in any machine kind's result: time, speed-up, agreement."""
    keys = sorted({(b, c) for r in results for b, comps in r.get("backends", {}).items() for c in comps})

    def figure(backend, comp):
        def show(r, o):
            f = dig(r, "backends", backend, comp)
            if not f:
                return None
            t = f"{f['s']} s" if "s" in f else f"{f['ms_per_query']} ms/query"
            speed = f", {f['speedup_vs_reference']}x" if "speedup_vs_reference" in f and backend != "reference-exact" else ""
            agree = "" if "same" not in f else (", same" if f["same"] else
                                                f", max diff {f.get('max_abs_diff', f.get('differ_fraction'))}")
            return t + speed + agree
        return show

    return [(f"{backend}: {comp}", figure(backend, comp)) for backend, comp in keys]


def scale_rows(results: list[dict]) -> list[Row]:
    """bench_scale.py: 1 vs 2 ranks (when run) and the synthetic engine runs, one row per size."""
    sizes = sorted({x["vectors"] for r in results for x in r.get("synthetic", [])})

    def synth(n):
        def show(r, o):
            x = next((y for y in r.get("synthetic", []) if y["vectors"] == n), None)
            if x is None:
                return None
            ph = x.get("phases_s", {})
            return (f"{x['centroids']} centroids; {x['total_s']} s (k-means {ph.get('kmeans_s')}, compress "
                    f"{ph.get('compress_s')}); peak RSS {x['peak_rss_mb_build']} MB; "
                    f"{x['disk_mb']} MB; p50 k=10 / k=100 {x['search_p50_ms_k10']} / {x['search_p50_ms_k100']} ms")
        return show

    return [
        ("ranks: encode speed-up 2 vs 1 (target >= 1.8x) / build speed-up",
         lambda r, o: pair(dig(r, "ranks", "speedup_encode"), dig(r, "ranks", "speedup_build"), unit="x")),
        ("ranks: byte-identical index", lambda r, o: dig(r, "ranks", "byte_identical")),
        ("ranks: peak RSS MB per rank, 1 / 2 ranks",
         lambda r, o: " / ".join(str(x["peak_rss_mb_per_rank"]) for x in dig(r, "ranks", "runs"))),
        *[(f"synthetic {n:,} vectors", synth(n)) for n in sizes],
    ]


def pruning_rows(results: list[dict]) -> list[Row]:
    """plaid_assign_pruning.py: centroid dot products a two-level bound would still need, per group count."""
    groups = sorted({x["groups"] for r in results for x in r.get("two_level_bound", [])})

    def show(g):
        def figure(r, o):
            x = next((y for y in r.get("two_level_bound", []) if y["groups"] == g), None)
            return None if x is None else (f"{x['of_full_scan']:.0%} of the full scan ({x['dots_per_vector']} of "
                                           f"{r['centroids']} dots; {x['groups_surviving']:.0%} of groups survive)")
        return figure

    iterations = sorted({x["iteration"] for r in results for x in dig(r, "kmeans_drift_bound", "iterations") or []})

    def drift(t):
        def figure(r, o):
            x = next((y for y in dig(r, "kmeans_drift_bound", "iterations") or [] if y["iteration"] == t), None)
            if x is None:
                return None
            b = x["best"]
            return (f"{b['of_full_scan']:.0%} of the full scan at best (m {b['candidates']}, tau {b['tau']}: "
                    f"{b['movers']:.0%} movers, {b['rows_proven']:.0%} of rows proven); drift median {x['drift_median']}")
        return figure

    return [(f"{g} groups of centroids", show(g)) for g in groups] + \
        [(f"k-means iteration {t}: drift bound", drift(t)) for t in iterations]


def hints_rows(results: list[dict]) -> list[Row]:
    """plaid_kmeans_hints.py: k-means step seconds without and with hints, and whether the centroids agree."""
    def steps(mode):
        return lambda r, o: " / ".join(f"{s:.3f}" for s in r["step_s_median"][mode])
    return [("vectors x centroids; backend", lambda r, o: f"{r['vectors']:,} x {r['centroids']:,}; "
             f"{r['backend']['name']}-{r['backend']['precision']}"),
            ("steps 1-4 unhinted, s", steps("unhinted")), ("steps 1-4 hinted, s", steps("hinted")),
            ("steps 2-4 unhinted -> hinted, s", lambda r, o: f"{r['steps_2_to_4_s']['unhinted']} -> "
             f"{r['steps_2_to_4_s']['hinted']}"),
            ("the same centroids", lambda r, o: r["same_centroids"])]


SECTIONS: dict[str, Callable[[list[dict]], list[Row]]] = {
    "plaid_backends": backends_rows,
    "pretokenize": lambda rs: pretokenize_rows(), "dense": lambda rs: dense_rows(),
    "plaid": lambda rs: plaid_rows(), "plaid_index_runs": lambda rs: index_runs_rows(),
    "plaid_stages": lambda rs: stages_rows(), "plaid_seeds": seeds_rows,
    "plaid_search_floor": lambda rs: search_floor_rows(), "plaid_build_rest": lambda rs: build_rest_rows(),
    "search_vs_colbertai": lambda rs: compare_rows(), "peers": lambda rs: peers_rows(),
    "train": lambda rs: train_rows(), "train_speed": lambda rs: train_speed_rows(),
    "colbert": lambda rs: colbert_rows(),
    "lifecycle": lambda rs: lifecycle_rows(), "lifecycle_delete_seeds": lambda rs: delete_seeds_rows(),
    "grow_vs_fresh": lambda rs: grow_rows(), "grow_vs_fresh_full": lambda rs: grow_rows(),
    "lifecycle_colbertai": lifecycle_colbertai_rows, "scale": scale_rows, "scale_ranks": scale_rows,
    "scale_fixed": scale_rows, "assign_pruning": pruning_rows, "plaid_kmeans_hints": hints_rows,
    "cold_start": lambda rs: cold_start_rows(), "api": lambda rs: api_rows(),
    "read_checks": lambda rs: read_checks_rows(),
    "encoder": lambda rs: encoder_rows(), "bf16_attention": lambda rs: bf16_attention_rows(),
    "bf16_gelu_fusion": lambda rs: bf16_attention_rows("fused", "separate GELU"),
    "bf16_stack": lambda rs: bf16_attention_rows("stack", "modules"),
    "bf16_attention_amx": lambda rs: bf16_attention_rows("AMX", "AVX-512"),
    "bf16_norm": lambda rs: bf16_attention_rows("one pass", "torch"),
    "bf16_linear": lambda rs: bf16_attention_rows("tiles", "oneDNN"),
    "search_precision": search_precision_rows,
    "trust_matrix": lambda rs: trust_rows(rs),
}


def trust_rows(results: list[dict]) -> list[Row]:
    """Cases and verdicts of bench/trust_matrix.py, in all and per class."""
    def verdicts(counts: dict) -> str:
        return " / ".join(str(counts.get(v, 0)) for v in ("GOOD", "POOR", "BAD")) + (
            f" ({counts['NOT_RUN']} not run)" if counts.get("NOT_RUN") else "")

    classes = sorted({c for r in results for c in r.get("per_class", {})})
    return [("cases", lambda r, o: r["cases"]), ("GOOD / POOR / BAD", lambda r, o: verdicts(r["totals"]))] + [
        (f"{c}: GOOD / POOR / BAD", lambda r, o, c=c: verdicts(r["per_class"][c])) for c in classes]


# ------------------------------------------------------------------ rendering -----------------------------
def cell(value) -> str:
    text = "-" if value is None or value == "" else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def provenance_rows() -> list[Row]:
    def known(r, o):
        source = dig(r, "provenance", "machine_kind_source")
        return "inferred (see provenance)" if source and source.startswith("inferred") else "recorded"

    def commit(r, o):
        c = dig(r, "provenance", "git_commit")
        return f"`{c[:10]}`{' + local changes' if dig(r, 'provenance', 'git_dirty') else ''}" if c else None

    return [("date", lambda r, o: (dig(r, "provenance", "date") or "")[:10] or None), ("commit", commit),
            ("command", lambda r, o: f"`{dig(r, 'provenance', 'command')}`" if dig(r, "provenance", "command") else None),
            ("machine kind", known), ("note", lambda r, o: dig(r, "provenance", "note"))]


def section(name: str, all_kinds: list[str], cache: dict) -> list[str]:
    present = [k for k in all_kinds if cache[k].get(name) is not None]
    if not present:
        return []
    results = [cache[k][name] for k in present]
    rows = SECTIONS[name](results) + provenance_rows()
    lines = [f"## {name}", "", f"{BENCHMARKS[name]}; file: `bench/results/<machine kind>/{name}.json`.", "",
             "| | " + " | ".join(f"`{k}`" for k in present) + " |", "|---|" + "---|" * len(present)]
    for label, figure in rows:
        values = []
        for kind, result in zip(present, results, strict=True):
            try:
                values.append(figure(result, cache[kind]))
            except (KeyError, TypeError, ValueError, ZeroDivisionError):  # an older result's shape: show "-"
                values.append(None)
        if any(v not in (None, "") for v in values):
            lines.append(f"| {cell(label)} | " + " | ".join(cell(v) for v in values) + " |")
    return [*lines, ""]


def machines(all_kinds: list[str], cache: dict) -> list[str]:
    lines = ["| machine kind | CPU | results |", "|---|---|---|"]
    for kind in all_kinds:
        cpus = {dig(r, "provenance", "machine", "cpu") for r in cache[kind].values() if r} - {None, ""}
        names = [n for n in BENCHMARKS if cache[kind].get(n) is not None]
        lines.append(f"| `{kind}` | {cell(', '.join(sorted(cpus)) or 'not recorded')} | {cell(', '.join(names))} |")
    return lines


def render() -> str:
    all_kinds = kinds()
    cache = {k: {n: load(n, k) for n in BENCHMARKS} for k in all_kinds}
    out = ["# Bench results", "",
           "Generated by `bench/summarize.py` from the latest result of each benchmark per machine kind",
           "(`bench/results/<machine kind>/<benchmark>.json`); do not edit by hand. How the figures are measured,",
           "and how to run or promote a result: [bench/README.md](README.md). Figures from different machine kinds",
           "are not comparable with each other; figures within one column may come from different dates (see the",
           "date and commit rows of each section). Plots: `bench/results/<machine kind>/*.png`.", "",
           *machines(all_kinds, cache), ""]
    for name in BENCHMARKS:
        out += section(name, all_kinds, cache)
    unknown = sorted({p.stem for k in all_kinds for p in (RESULTS / k).glob("*.json")} - set(BENCHMARKS))
    if unknown:
        out += ["## Other results", "", "Not summarized (add them to `BENCHMARKS` in bench/resultfiles.py): "
                + ", ".join(f"`{n}`" for n in unknown), ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when bench/RESULTS.md is out of date")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run python bench/summarize.py", file=sys.stderr)
            return 1
        return 0
    from embedctl.util import atomic

    atomic.write_text(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
