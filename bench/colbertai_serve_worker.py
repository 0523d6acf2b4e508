"""colbert-ai's side of bench_serve.py's peer row: index the served documents, then ``Searcher.search`` in a
loop (one query at a time, k=10) and ``Searcher.search_all`` (all the queries in one call), from a spec JSON;
run by the peer kit's colbert venv python (DIR/peers-work/venv-colbert), never by embedctl's.

    venv-colbert/bin/python bench/colbertai_serve_worker.py SPEC.json

``spec["rounds"]`` (interleaved mode): after the warm-up the worker prints ``READY``, then runs one loop over
the queries for each ``go`` line read on stdin, printing ``ROUND {json}`` (that loop's latencies) after each,
so that the caller runs its own engine between the peer's loops, under the same host load; ``end`` stops it.
``spec["reuse"]``: an index this worker built earlier from the same spec (texts, checkpoint, settings:
``spec_key.json`` beside it) is searched without indexing again (``index_s`` is then absent).

A file, not `python -c`: colbert-ai's Indexer starts a spawned child that re-imports __main__."""

import hashlib
import json
import os
import sys
import time

KEYED = ("texts", "checkpoint", "nbits", "doc_maxlen", "query_maxlen")


def spec_key(spec):
    return hashlib.sha256(json.dumps({k: spec[k] for k in KEYED}, sort_keys=True).encode()).hexdigest()


def loop(searcher, queries, k):
    lat = []
    t0 = time.perf_counter()
    for text in queries:
        t = time.perf_counter()
        searcher.search(text, k=k)
        lat.append(time.perf_counter() - t)
    return lat, time.perf_counter() - t0


def main(spec_path):
    spec = json.load(open(spec_path))
    import torch
    from colbert import Indexer, Searcher
    from colbert.infra import ColBERTConfig, Run, RunConfig

    root, texts, queries = spec["root"], spec["texts"], spec["queries"]
    out = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(), "documents": len(texts)}

    def config():
        return ColBERTConfig(nbits=spec["nbits"], doc_maxlen=spec["doc_maxlen"], query_maxlen=spec["query_maxlen"],
                             kmeans_niters=4, nranks=1, root=root)

    os.makedirs(root, exist_ok=True)
    key_file, key = os.path.join(root, "spec_key.json"), spec_key(spec)
    built = json.load(open(key_file)) if os.path.exists(key_file) else {}
    with Run().context(RunConfig(nranks=1, experiment="serve", root=root)):
        if spec.get("reuse") and built.get("key") == key and os.path.isdir(built.get("path", "")):
            path = built["path"]
            out["index_reused"] = path
        else:
            tsv = os.path.join(root, "collection.tsv")
            with open(tsv, "w") as f:
                for pid, text in enumerate(texts):
                    f.write(f"{pid}\t{text}\n")
            t0 = time.perf_counter()
            path = Indexer(checkpoint=spec["checkpoint"], config=config()).index(name="serve", collection=tsv,
                                                                                  overwrite=True)
            out["index_s"] = round(time.perf_counter() - t0, 1)
            json.dump({"key": key, "path": path}, open(key_file, "w"))
        searcher = Searcher(index=path, config=config(), verbose=1)
    k = spec["k"]
    for text in queries[:10]:  # warm-up, not timed
        searcher.search(text, k=k)
    if spec.get("rounds"):
        json.dump(out, open(spec["out"], "w"), indent=1)  # the index's facts; the rounds go to stdout
        print("READY", flush=True)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            lat, wall = loop(searcher, queries, k)
            print("ROUND " + json.dumps({"lat_ms": [round(1000 * x, 3) for x in lat], "wall_s": round(wall, 3)}),
                  flush=True)
        return
    lat, wall = loop(searcher, queries, k)
    lat_ms = sorted(1000 * x for x in lat)
    out["loop"] = {"requests": len(queries), "k": k, "qps": round(len(queries) / wall, 2),
                   "p50_ms": round(lat_ms[len(lat_ms) // 2], 2), "p99_ms": round(lat_ms[int(0.99 * (len(lat_ms) - 1))], 2)}
    t0 = time.perf_counter()
    searcher.search_all({str(i): q for i, q in enumerate(queries)}, k=k)
    out["search_all_qps"] = round(len(queries) / (time.perf_counter() - t0), 2)
    json.dump(out, open(spec["out"], "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
