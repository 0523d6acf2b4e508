"""End-to-end PLAID search (text in, ranked ids out), one query at a time, WARP-style candidates (the default)
beside PLAID's stages in one run (issue 36):

    python bench/bench_e2e.py --index trained=runs/.../indexes/plaid_trained [--index minilm=DIR]
                              [--queries 100] [--threads 1,2] [--rounds 3] [--out FILE]

For each index and thread count: two ``embedctl.Index`` objects on it (``search.candidates=auto`` and
``search.candidates=plaid``, both with ``search.threads=N`` and ``search.query_threads=N``; one encoder shared), then the SciFact test
queries one at a time through ``Index.search(text, 10, text=False)``, the two alternating query by query so
that host load hits both alike, for several rounds. Reported per setting: wall p50/p95 and the thread's CPU
p50 (a loaded host's waits left out), the encode / retrieve split of the warp setting (the encoder's own call
timed apart on the same queries), and warp over plaid. Then ``warp_alone``: the warp setting by itself for as
many rounds, query after query, and the encoder by itself (``encode_alone_p50_ms``), as a service that runs one
setting sees them: alternating, each search starts with the caches the other setting's search left (on a
2-core AMX host, minilm over 5,183 SciFact documents, one thread: 8.25 ms against 7.72 alone). Writes bench/results/<machine kind>/e2e.json (see
resultfiles.py). Nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchdata import add_index_arguments, find_scifact, queries_of
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import embedctl  # noqa: E402


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return round(1000 * v[min(len(v) - 1, int(q * len(v)))], 3)


def bench_index(path: Path, texts: list[str], threads: int, rounds: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    # N threads: the encoder's (torch) and the query's retrieval (search.query_threads) alike
    each = [f"search.threads={threads}", f"search.query_threads={threads}"]
    warp = embedctl.Index.open(path, overrides=each)
    plaid = embedctl.Index.open(path, overrides=[*each, "search.candidates=plaid"], encoder=warp.encoder)
    for q in texts[:10]:  # warm up: models, memory maps, scratch buffers
        warp.search(q, 10, text=False)
        plaid.search(q, 10, text=False)
    runs = {"warp": (warp, [], []), "plaid": (plaid, [], [])}
    encode: list[float] = []
    for r in range(rounds):
        for i, q in enumerate(texts):
            order = list(runs.items()) if (i + r) % 2 == 0 else list(runs.items())[::-1]
            for _, (idx, wall, cpu) in order:
                t, c = time.perf_counter(), time.thread_time()
                idx.search(q, 10, text=False)
                cpu.append(time.thread_time() - c)
                wall.append(time.perf_counter() - t)
            t = time.perf_counter()
            warp.encoder.encode_queries([q])
            encode.append(time.perf_counter() - t)
    # then the warp setting alone, and the encoder alone, as a service runs them (query after query of one
    # setting: what one search leaves in the caches is what the next one reads)
    alone: list[float] = []
    alone_cpu: list[float] = []
    alone_encode: list[float] = []
    for _ in range(rounds):
        for q in texts:
            t, c = time.perf_counter(), time.thread_time()
            warp.search(q, 10, text=False)
            alone_cpu.append(time.thread_time() - c)
            alone.append(time.perf_counter() - t)
    for _ in range(rounds):
        for q in texts:
            t = time.perf_counter()
            warp.encoder.encode_queries([q])
            alone_encode.append(time.perf_counter() - t)
    out: dict = {}
    for name, (_, wall, cpu) in runs.items():
        out[name] = {"p50_ms": pct(wall, 0.5), "p95_ms": pct(wall, 0.95), "cpu_p50_ms": pct(cpu, 0.5), "n": len(wall)}
    out["warp_alone"] = {"p50_ms": pct(alone, 0.5), "p95_ms": pct(alone, 0.95), "cpu_p50_ms": pct(alone_cpu, 0.5),
                         "n": len(alone), "encode_alone_p50_ms": pct(alone_encode, 0.5)}
    out["encode_p50_ms"] = pct(encode, 0.5)
    out["warp_retrieve_p50_ms_estimate"] = round(out["warp"]["p50_ms"] - out["encode_p50_ms"], 3)
    out["warp_over_plaid_p50"] = round(out["warp"]["p50_ms"] / out["plaid"]["p50_ms"], 3)
    out["candidates"] = warp.session.retriever.searcher.last_params.get("candidates")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_index_arguments(ap, queries=100)
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/e2e.json)")
    args = ap.parse_args()
    _, texts, _ = queries_of(find_scifact(args.scifact), "test")
    texts = texts[:args.queries]
    result: dict = {"k": 10, "queries": len(texts), "rounds": args.rounds, "loadavg_start": os.getloadavg(),
                    "what": "Index.search(text, 10, text=False) one query at a time: encode + retrieve", "indexes": {}}
    for spec in args.index:
        name, _, folder = spec.partition("=")
        for t in (int(x) for x in args.threads.split(",")):
            row = bench_index(Path(folder), texts, t, args.rounds)
            result["indexes"].setdefault(name, {})[f"threads_{t}"] = row
            print(name, f"threads={t}", row, flush=True)
    result["loadavg_end"] = os.getloadavg()
    write_result("e2e", result, args.out)


if __name__ == "__main__":
    main()
