"""Encode backends side by side with today's path, in one run: ``python bench/bench_encoder.py`` -> encoder.

minilm as an untrained ColBERT (doc_max_length 180, as bench_plaid.py), on SciFact:
- query encoding p50 (ColBERT queries are 32 tokens), text in -> vectors out, one query per call, with 1 and
  2 threads; backends interleaved query by query (each query then starts with the caches another backend's
  weights left: on a 2-core AMX host bf16 took 4.9 ms so against 3.3 alone, one thread), then each backend alone for as
  many rounds (``alone_p50_ms``: as a service running one backend sees it);
- document encoding docs/s on a SciFact slice (every document relevant to the first ``--queries`` test
  queries, then the first others up to ``--docs``) through the index's encoding path
  (embedctl.index.encoding): ``today`` is the reference without length bucketing (batches of 32 in input
  order, as before), each backend with it; the rounds interleave the paths;
- fidelity of each backend against the reference on those documents and on the queries: per-vector cosine
  (min, 0.1th percentile, mean; bound >= 0.999), and nDCG@10 of exhaustive MaxSim on the slice (bound:
  within 0.002 of the reference);
- per-process load cost (``--only load``): fresh processes, alternating backends, each timing its imports,
  ``load_encoder`` (for onnx: importing onnxruntime, hashing the weights to find the cached graph, opening
  the session) and its first one-query encode; the graph is cached by an untimed first process. With the
  query p50s of the same run, how many one-query encodes pay for the load cost (``breakeven_queries``);
- PLAID build wall, ``today`` (reference, no bucketing) vs ``auto`` (what model.encoder_backend=auto picks
  for an index build, with bucketing) and each fast backend, on the first ``--build-docs`` SciFact documents, alternating.
The host may be loaded: compare the ratios taken in the same run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from benchdata import find_scifact  # noqa: E402
from resultfiles import write_result  # noqa: E402

from embedctl.config.sections.index import IndexConfig  # noqa: E402
from embedctl.config.sections.model import ModelConfig  # noqa: E402
from embedctl.eval.metrics import evaluate_run  # noqa: E402
from embedctl.index.build import build_plaid_index  # noqa: E402
from embedctl.index.encoding import encode_with_progress  # noqa: E402
from embedctl.models.encoder import colbert_scores, load_encoder  # noqa: E402
from embedctl.util.progress import Progress  # noqa: E402


class Unbucketed:
    """Today's index encoding: the encoder without ``document_ids``, so encode_with_progress cuts batches in
    input order (what it did before length bucketing)."""

    def __init__(self, encoder):
        self.encoder, self.dim, self.kind = encoder, encoder.dim, encoder.kind

    def encode_documents(self, items, batch_size=32, progress=False):
        return self.encoder.encode_documents(items, batch_size=batch_size)


def read_slice(scifact: Path, num_docs: int, num_queries: int):
    rows = [line.split("\t") for line in (scifact / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qrels: dict[str, dict[str, int]] = {}
    for qid, did, rel in rows:
        if len(qrels) < num_queries or qid in qrels:
            qrels.setdefault(qid, {})[did] = int(rel)
    wanted = {d for q in qrels.values() for d in q}
    ids, texts = [], []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row["_id"] in wanted or len(ids) < num_docs - len(wanted - set(ids)):
                ids.append(row["_id"])
                texts.append(f"{row.get('title') or ''} {row.get('text') or ''}".strip())
    queries = {}
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row["_id"] in qrels:
                queries[row["_id"]] = row["text"]
    return ids, texts, queries, qrels


def corpus_texts(scifact: Path, limit: int) -> list[str]:
    texts = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if len(texts) >= limit:
                break
            row = json.loads(line)
            texts.append(f"{row.get('title') or ''} {row.get('text') or ''}".strip())
    return texts


def cosines(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    ref, got = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1])
    keep = np.linalg.norm(ref, axis=1) > 0
    c = (ref[keep] * got[keep]).sum(1) / np.linalg.norm(ref[keep], axis=1) / np.linalg.norm(got[keep], axis=1)
    return {"min": float(c.min()), "p0.1": float(np.percentile(c, 0.1)), "mean": float(c.mean()), "vectors": int(len(c))}


def ndcg10(Q: np.ndarray, vectors: np.ndarray, doclens: np.ndarray, qids: list[str], dids: list[str],
           qrels) -> float:
    width = int(doclens.max())
    D = np.zeros((len(doclens), width, vectors.shape[1]), dtype=np.float32)
    mask = np.arange(width)[None, :] < doclens[:, None]
    D[mask] = vectors
    scores = colbert_scores(torch.from_numpy(Q), torch.from_numpy(D), torch.from_numpy(mask)).numpy()
    run = {}
    for qi, qid in enumerate(qids):
        top = np.argsort(-scores[qi])[:10]
        run[qid] = {dids[j]: float(scores[qi, j]) for j in top}
    return float(evaluate_run(run, qrels, ["nDCG@10"])["nDCG@10"])


def load(backend: str, threads: int):
    torch.set_num_threads(threads)  # ONNX Runtime sessions take the thread count when they are opened
    return load_encoder(ModelConfig(kind="colbert", doc_max_length=180, encoder_backend=backend), device="cpu")


def query_p50(backends: list[str], texts: list[str], threads: int, rounds: int) -> dict:
    encoders = {b: load(b, threads) for b in backends}
    times: dict[str, list[float]] = {b: [] for b in backends}
    for b in backends:  # warm-up (first calls allocate)
        encoders[b].encode_queries(texts[:3])
    for _ in range(rounds):
        for text in texts:
            for b in backends:
                started = time.perf_counter()
                encoders[b].encode_queries([text])
                times[b].append(time.perf_counter() - started)
    # then each backend alone, query after query (as a service runs one backend: its weights stay in the caches
    # between queries), the backends' blocks alternating in order round by round
    alone: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(rounds):
        for b in (backends if r % 2 == 0 else backends[::-1]):
            for text in texts:
                started = time.perf_counter()
                encoders[b].encode_queries([text])
                alone[b].append(time.perf_counter() - started)
    out = {b: {"p50_ms": 1000 * statistics.median(v), "p90_ms": 1000 * float(np.percentile(v, 90)),
               "n": len(v), "alone_p50_ms": 1000 * statistics.median(alone[b])} for b, v in times.items()}
    for b in backends:
        out[b]["ratio_p50_vs_reference"] = out[b]["p50_ms"] / out["reference"]["p50_ms"]
        out[b]["alone_ratio_p50_vs_reference"] = out[b]["alone_p50_ms"] / out["reference"]["alone_p50_ms"]
    return out


LOAD_PROBE = """
import json, sys, time
started = time.perf_counter()
import torch
torch.set_num_threads(1)
from embedctl.config.sections.model import ModelConfig
from embedctl.models.encoder import load_encoder
imported = time.perf_counter()
enc = load_encoder(ModelConfig(kind="colbert", encoder_backend=sys.argv[1]), device="cpu")
loaded = time.perf_counter()
enc.encode_queries(["what causes scurvy?"])
done = time.perf_counter()
print(json.dumps({"imports_s": imported - started, "load_encoder_s": loaded - imported, "first_query_s": done - loaded,
                  "backend": enc.backend_name}))
"""


def load_cost(backends: list[str], rounds: int, query_ms: dict | None) -> dict:
    """Per-process cost of each backend, in fresh processes (see the module docstring)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}

    def probe(backend: str) -> dict:
        run = subprocess.run([sys.executable, "-c", LOAD_PROBE, backend], env=env, capture_output=True, text=True,
                             check=True)
        return json.loads(run.stdout.strip().splitlines()[-1])

    with tempfile.TemporaryDirectory(prefix="bench_encoder_cache_") as cache:
        env["EMBEDCTL_CACHE_DIR"] = cache  # cold: the first process of a fast backend exports the graph
        cold = {b: probe(b) for b in backends}
        runs: dict[str, list[dict]] = {b: [] for b in backends}
        for _ in range(rounds):
            for b in backends:
                runs[b].append(probe(b))
    out: dict = {"rounds": rounds, "threads": 1, "backends": {}}
    for b, rows in runs.items():
        out["backends"][b] = {key: statistics.median(r[key] for r in rows)
                              for key in ("imports_s", "load_encoder_s", "first_query_s")}
        out["backends"][b]["resolved"] = rows[0]["backend"]
        out["backends"][b]["cold_load_encoder_s"] = cold[b]["load_encoder_s"]  # graph not yet in the cache
    ref = out["backends"]["reference"]
    for b, row in out["backends"].items():
        row["extra_load_s_vs_reference"] = row["load_encoder_s"] - ref["load_encoder_s"]
        row["cold_extra_load_s_vs_reference"] = row["cold_load_encoder_s"] - ref["load_encoder_s"]
        saved_ms = (query_ms or {}).get("reference", {}).get("p50_ms", 0) - (query_ms or {}).get(b, {}).get("p50_ms", 0)
        if b != "reference" and saved_ms > 0:
            row["breakeven_queries"] = max(0.0, row["extra_load_s_vs_reference"]) * 1000 / saved_ms
    return out


def encode_docs(encoder, texts: list[str]):
    with Progress(len(texts), "encoding", enabled=False) as bar:
        return encode_with_progress(encoder, texts, 32, bar)


def documents(backends: list[str], texts: list[str], queries: dict, qrels, dids, threads: int, rounds: int) -> dict:
    encoders = {b: load(b, threads) for b in backends}
    paths = {"today": Unbucketed(encoders["reference"]), **encoders}
    seconds: dict[str, float] = {p: 0.0 for p in paths}
    outputs = {}
    for _ in range(rounds):
        for name, enc in paths.items():
            started = time.perf_counter()
            outputs[name] = encode_docs(enc, texts)
            seconds[name] += time.perf_counter() - started
            print(f"  docs {name}: {len(texts) / (seconds[name] / (_ + 1)):.2f} docs/s", flush=True)
    qids = list(queries)
    q_texts = [queries[q] for q in qids]
    Qs = {b: encoders[b].encode_queries(q_texts) for b in backends}
    ref_v, ref_l = outputs["reference"]
    out: dict = {"threads": threads, "docs": len(texts), "rounds": rounds, "paths": {}}
    for name in paths:
        v, lens = outputs[name]
        row = {"docs_per_s": rounds * len(texts) / seconds[name]}
        row["ratio_docs_per_s_vs_today"] = row["docs_per_s"] / (rounds * len(texts) / seconds["today"])
        row["same_doclens"] = bool(np.array_equal(lens, ref_l))
        row["doc_cosine"] = cosines(ref_v, v) if row["same_doclens"] else None
        backend = "reference" if name == "today" else name
        row["query_cosine"] = cosines(Qs["reference"], Qs[backend])
        row["ndcg@10"] = ndcg10(Qs[backend], v, lens, qids, dids, qrels)
        out["paths"][name] = row
    ref_ndcg = out["paths"]["reference"]["ndcg@10"]
    for row in out["paths"].values():
        row["ndcg@10_minus_reference"] = row["ndcg@10"] - ref_ndcg
        row["within_bound"] = bool(row["doc_cosine"] and row["doc_cosine"]["min"] >= 0.999
                                   and row["query_cosine"]["min"] >= 0.999 and abs(row["ndcg@10_minus_reference"]) <= 0.002)
    return out


def builds(backends: list[str], texts: list[str], threads: int, rounds: int) -> dict:
    """``backends``: the fast backends built beside ``today`` and ``auto``."""
    torch.set_num_threads(threads)
    paths = {"today": lambda: Unbucketed(load("reference", threads)),
             "auto": lambda: load("auto", threads)}  # the build resolves it for its number of documents
    paths.update({b: (lambda b=b: load(b, threads)) for b in backends if b not in ("reference", "auto")})
    walls: dict[str, list[dict]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="bench_encoder_") as work:
        for r in range(rounds):
            for name, make in paths.items():
                enc = make()
                started = time.perf_counter()
                summary = build_plaid_index(enc, texts, Path(work) / f"{name}{r}", IndexConfig(nbits=2, seed=0),
                                            progress=False)
                wall = time.perf_counter() - started
                walls[name].append({"wall_s": wall, "encode_s": summary["timings"].get("encode_s"),
                                    "backend": summary["backend"]})
                print(f"  build {name}: {wall:.1f} s (encode {summary['timings'].get('encode_s')})", flush=True)
    out = {"docs": len(texts), "threads": threads, "rounds": rounds, "paths": walls}
    today = statistics.median(w["wall_s"] for w in walls["today"])
    out["ratio_wall_vs_today"] = {p: statistics.median(w["wall_s"] for w in v) / today for p, v in walls.items()}
    return out


def padding(texts: list[str], batch_size: int = 32) -> dict:
    """Tokens encoded (padding included) in batches of ``batch_size`` cut in input order (today) and longest
    first (length bucketing): the noise-free part of what bucketing saves."""
    tok = load("reference", 1).tokenizer
    lengths = np.array([len(x) for x in tok.encode(texts, "document")])

    def padded(lens):
        return int(sum(lens[i:i + batch_size].max() * len(lens[i:i + batch_size]) for i in range(0, len(lens), batch_size)))

    today, bucketed = padded(lengths), padded(np.sort(lengths)[::-1])
    return {"docs": len(texts), "real_tokens": int(lengths.sum()), "tokens_today": today, "tokens_bucketed": bucketed,
            "saving": 1 - bucketed / today, "share_at_doc_max_length": float((lengths == lengths.max()).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact")
    ap.add_argument("--backends", default="reference,onnx,onnx-int8")
    ap.add_argument("--threads", default="1,2", help="query encoding thread counts")
    ap.add_argument("--query-rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=100, help="test queries (and their relevant documents)")
    ap.add_argument("--docs", type=int, default=300, help="documents in the fidelity / docs/s slice")
    ap.add_argument("--doc-threads", type=int, default=2)
    ap.add_argument("--doc-rounds", type=int, default=1)
    ap.add_argument("--build-docs", type=int, default=2000, help="0: no build")
    ap.add_argument("--build-rounds", type=int, default=1)
    ap.add_argument("--build-backends", default="", help="fast backends built beside today and auto (comma-separated)")
    ap.add_argument("--out")
    ap.add_argument("--load-rounds", type=int, default=5, help="fresh processes per backend for the load cost")
    ap.add_argument("--only", default="queries,load,docs,padding,build", help="parts to run (a loaded host: run them as "
                    "separate processes with --out bench/work/..., then --merge)")
    ap.add_argument("--merge", nargs="+", help="result files of separate parts: merged into one result")
    args = ap.parse_args()
    if args.merge:
        merged: dict = {}
        for path in args.merge:
            part = json.loads(Path(path).read_text())
            for key, value in part.items():
                if key != "provenance":  # a repeated part (another build round) keeps both
                    merged[key if key not in merged or key in ("model", "backends", "host_note", "doc_max_length")
                           else f"{key}_{sum(k.startswith(key) for k in merged) + 1}"] = value
            merged.setdefault("parts", []).append(part["provenance"])
        write_result("encoder", merged, args.out)
        return
    only = set(args.only.split(","))
    scifact = find_scifact(args.scifact)
    backends = args.backends.split(",")
    assert backends[0] == "reference", "the reference comes first"
    dids, texts, queries, qrels = read_slice(scifact, args.docs, args.queries)
    result: dict = {"model": "minilm as ColBERT (fresh projection), doc_max_length 180", "backends": backends,
                    "host_note": "shared 2-core host, loaded by other jobs: compare ratios within this run",
                    "doc_max_length": 180, "load_average_at_start": list(os.getloadavg())}
    if "queries" in only:
        result["query_encoding"] = {}
    for t in (int(x) for x in args.threads.split(",") if "queries" in only and x):
        result["query_encoding"][f"threads_{t}"] = query_p50(backends, list(queries.values()), t, args.query_rounds)
        print(f"queries, {t} thread(s):", json.dumps(result["query_encoding"][f"threads_{t}"]), flush=True)
    if "load" in only:
        query_ms = result.get("query_encoding", {}).get("threads_1")
        result["load_cost"] = load_cost([b for b in backends if b != "onnx-int8"], args.load_rounds, query_ms)
        print("load:", json.dumps(result["load_cost"]), flush=True)
    if "docs" in only:
        result["documents"] = documents(backends, texts, queries, qrels, dids, args.doc_threads, args.doc_rounds)
        print("documents:", json.dumps(result["documents"]), flush=True)
        paths = result["documents"]["paths"]
        for b, row in result.get("load_cost", {}).get("backends", {}).items():
            if b in paths and b != "reference":  # documents (doc_threads) that pay the load cost back
                saved_s = 1 / paths["today"]["docs_per_s"] - 1 / paths[b]["docs_per_s"]
                if saved_s > 0:
                    row["breakeven_docs"] = max(0.0, row["extra_load_s_vs_reference"]) / saved_s
                    row["breakeven_docs_cold"] = max(0.0, row["cold_extra_load_s_vs_reference"]) / saved_s
    if "padding" in only:
        result["padding"] = padding(corpus_texts(scifact, args.build_docs or 2000))
        print("padding:", json.dumps(result["padding"]), flush=True)
    if args.build_docs and "build" in only:
        result["plaid_build"] = builds([b for b in args.build_backends.split(",") if b],
                                       corpus_texts(scifact, args.build_docs), args.doc_threads, args.build_rounds)
        print("build:", json.dumps(result["plaid_build"]), flush=True)
    result["load_average_at_end"] = list(os.getloadavg())
    write_result("encoder", result, args.out)


if __name__ == "__main__":
    main()
