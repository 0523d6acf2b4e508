"""`embedctl serve` under load, during writes and through kill -9: ``python bench/bench_serve.py [--docs N]``.

For each index kind (PLAID with minilm as an untrained ColBERT, dense with minilm) built from the first
``--docs`` SciFact documents under bench/work/serve/, a real server process on 127.0.0.1 (ephemeral
port) and real HTTP clients (aiohttp for the load, httpx for single requests) on the same host, loopback only, every loop bounded:

- ``in_process``: the engine without HTTP: ``Index.search`` of one query at a time (QPS, p50) and of the
  same queries in one call (QPS): the server's overhead is read against these.
- ``load``: QPS and p50/p95/p99 at 1, 4, 16 and 64 concurrent clients (``--requests`` each level, k=10,
  SciFact test queries in turn), then 1 and 16 again; ``qps16_over_qps1`` is taken from that second,
  adjacent pair (same load on the host for both; target >= 2.5x), the first pass is reported too. The
  second pass also runs, interleaved, on a second server whose batch window stretches
  (``serve.batch_window_max_ms`` = ``--window-ab-ms``, 25; 0 skips it): ``qps16_stretched_over_default``.
- ``reads_during_writes``: 16 search clients for ``--write-seconds`` without writes, then as long with one
  client adding 1% of the served collection every second (``--adds-per-second`` to change it; documents past
  the slice): failed reads, read p99 of
  each phase and their ratio (target <= 2x), and for each acknowledged add whether a search sent right
  after the acknowledgement finds the added document in its top 10 by its own text.
- ``writer_cost`` (``--writer-adds``, 60): that many adds of 1% of the collection one after another with no
  reads, on a fresh copy, with merges (``index.merge_factor`` default) and without (0): acknowledgement time
  and the server's CPU per add over the first and the last ten, and the segments after.
- ``faults`` (``--fault-kinds``): ``--fault-trials`` rounds of a stream of add and delete batches from 3
  clients, kill -9 of the server at a random moment, restart: every acknowledged change present, every
  unacknowledged request all there or not at all, ``Index.info(verify=True)`` clean.
- ``rss``: the server's RSS with the index open (after one search) and its peak after the 64-client load.
- ``colbertai_searcher`` (``--colbertai``): colbert-ai's ``Searcher.search`` in a loop (and ``search_all``) on
  the model and documents of ``--peer-kind`` (plaid, or plaid_trained: the issue's trained ColBERT), in the
  peer kit's venv (bench/serve_peer.py); skipped, saying how to build the venv, when it is missing. With
  ``--peer-build``, our own build of the same documents with the same model is timed right before it
  (``ours_index_s``, ``index_wall_ours_over_colbertai``). With ``--peer-rounds N``, colbert-ai's loop and ours
  alternate for N rounds over the same queries (its Searcher kept loaded between them; each engine first in
  every other round): ``rounds`` and ``ours_over_colbertai_median``, the comparison under one host load.
- ``plaid_trained`` (``--checkpoint DIR``): the PLAID kind again with a trained ColBERT (in_process, load,
  reads_during_writes: the issue's PLAID model, whose documents are 180 tokens long against minilm's 256).
- ``load_average`` / ``host``: the host's load averages at the start and end of each kind; ``host`` says
  "loaded" when any reached 2 (a 2-core host): read the ratios, not the absolute figures, then.

The load generator runs on the same cores as the server: on a 2-core host it takes a share of the CPU
the server could have used. Writes bench/results/<machine kind>/serve.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

import aiohttp
import httpx
from benchdata import find_scifact
from resultfiles import write_result
from serve_faults import faults
from serve_peer import DEFAULT_PEERS, colbertai_interleaved, colbertai_searcher, ours_loop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.serving import Server  # noqa: E402

import embedctl  # noqa: E402
from embedctl.eval.io import read_qrels  # noqa: E402

KIND_OVERRIDES = {"plaid": ["model.kind=colbert"], "dense": []}
LEVELS = (1, 4, 16, 64)


def corpus_rows(scifact: Path) -> list[dict]:
    return [json.loads(line) for line in (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]


def test_queries(scifact: Path) -> list[str]:
    qrels = read_qrels(str(scifact / "qrels" / "test.tsv"))
    out = []
    for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["_id"] in qrels:
            out.append(row["text"])
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(lat: list[float], wall: float, failed: int = 0) -> dict:
    return {"requests": len(lat), "failed": failed, "qps": round(len(lat) / wall, 2),
            "p50_ms": round(1000 * statistics.median(lat), 2), "p95_ms": round(1000 * pct(lat, 95), 2),
            "p99_ms": round(1000 * pct(lat, 99), 2)}


# -- in process -----------------------------------------------------------------------------------------
def in_process(path: Path, queries: list[str], n: int, overrides: list[str]) -> dict:
    idx = embedctl.Index.open(path, overrides=overrides)
    idx.search(queries[0], 10)
    batch = queries[:n]
    lat = []
    t0 = time.perf_counter()
    for q in batch:
        t = time.perf_counter()
        idx.search(q, 10)
        lat.append(time.perf_counter() - t)
    single_wall = time.perf_counter() - t0
    t = time.perf_counter()
    idx.search(batch, 10)
    batched_wall = time.perf_counter() - t
    return {"one_at_a_time": summary(lat, single_wall), "one_call_qps": round(len(batch) / batched_wall, 2)}


# -- load -----------------------------------------------------------------------------------------------
async def _load(url: str, queries: list[str], clients: int, requests: int, k: int = 10,
                stop: threading.Event | None = None) -> tuple[list[float], int, float]:
    """``clients`` concurrent clients sending ``requests`` searches in all (or until ``stop``). aiohttp, not
    httpx: the load generator shares the server's 2 cores, and httpx's AsyncClient spent 1.6-2.1 ms of CPU per
    request there against aiohttp's 0.15-0.6 ms (measured side by side on one server), which capped the 16-client
    figure at the client's speed (the server's search thread waited 39% of the time under 16 httpx clients)."""
    lat: list[float] = []
    failed = 0
    counter = iter(range(requests))
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(base_url=url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=120)) as client:
        async def worker() -> None:
            nonlocal failed
            for i in counter:
                if stop is not None and stop.is_set():
                    return
                t = time.perf_counter()
                try:
                    body = {"query": queries[i % len(queries)], "k": k, "text": False}
                    async with client.post("/search", json=body) as r:
                        await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                if ok:
                    lat.append(time.perf_counter() - t)
                else:
                    failed += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - t0
    return lat, failed, wall


def load_levels(srv: Server, queries: list[str], requests: int, other: Server | None = None) -> dict:
    """QPS per client count; ``other``: a second server on the same index with a stretching batch window
    (``serve.batch_window_max_ms``), measured in the second pass interleaved with ``srv`` (same host load)."""
    asyncio.run(_load(srv.url, queries, 4, 16))  # warm
    out: dict = {"first_pass": {}, "second_pass": {}}
    for c in LEVELS:
        lat, failed, wall = asyncio.run(_load(srv.url, queries, c, max(requests, 2 * c)))
        out["first_pass"][str(c)] = summary(lat, wall, failed)
        print(f"  {c} clients: {out['first_pass'][str(c)]}", flush=True)
    servers = {"second_pass": srv}
    if other is not None:
        asyncio.run(_load(other.url, queries, 4, 16))
        servers["second_pass_stretched_window"] = other
        out["second_pass_stretched_window"] = {}
    for c in (1, 16):
        for name, s in servers.items():
            lat, failed, wall = asyncio.run(_load(s.url, queries, c, max(requests, 2 * c)))
            out[name][str(c)] = summary(lat, wall, failed)
            print(f"  again {c} clients ({name}): {out[name][str(c)]}", flush=True)
    out["qps16_over_qps1"] = round(out["second_pass"]["16"]["qps"] / out["second_pass"]["1"]["qps"], 3)
    out["qps16_over_qps1_first_pass"] = round(out["first_pass"]["16"]["qps"] / out["first_pass"]["1"]["qps"], 3)
    if other is not None:
        row = out["second_pass_stretched_window"]
        out["qps16_over_qps1_stretched_window"] = round(row["16"]["qps"] / row["1"]["qps"], 3)
        out["qps16_stretched_over_default"] = round(row["16"]["qps"] / out["second_pass"]["16"]["qps"], 3)
    return out


# -- reads during writes --------------------------------------------------------------------------------
def reads_during_writes(srv: Server, queries: list[str], extra: list[dict], per_second: int, seconds: float) -> dict:
    def phase(with_writes: bool) -> dict:
        stop = threading.Event()
        adds: list[dict] = []
        writer = None
        if with_writes:
            writer = threading.Thread(target=_writer, args=(srv.url, extra, per_second, stop, adds))
            writer.start()
        timer = threading.Timer(seconds, stop.set)
        timer.start()
        lat, failed, wall = asyncio.run(_load(srv.url, queries, 16, 10**9, stop=stop))
        if writer is not None:
            writer.join(timeout=600)
        row = summary(lat, wall, failed)
        if with_writes:
            row["adds"] = len(adds)
            row["docs_added"] = sum(a["docs"] for a in adds)
            row["add_ack_p50_ms"] = round(1000 * statistics.median([a["ack_s"] for a in adds]), 1) if adds else None
            row["found_right_after_ack"] = sum(a["found"] for a in adds)
            row["checked_after_ack"] = len(adds)
        return row

    quiet = phase(False)
    print(f"  reads alone: {quiet}", flush=True)
    busy = phase(True)
    print(f"  reads during writes: {busy}", flush=True)
    return {"seconds": seconds, "docs_per_second": per_second, "no_writes": quiet, "with_writes": busy,
            "p99_ratio": round(busy["p99_ms"] / quiet["p99_ms"], 3)}


def _writer(url: str, extra: list[dict], per_second: int, stop: threading.Event, adds: list[dict]) -> None:
    """One client adding ``per_second`` documents every second; after each ack, searches one of them."""
    pos = 0
    with httpx.Client(base_url=url, timeout=600) as client:
        while not stop.is_set() and pos + per_second <= len(extra):
            started = time.perf_counter()
            docs = [{"id": d["_id"], "title": d.get("title") or None, "text": d["text"] or "(empty)"}
                    for d in extra[pos:pos + per_second]]
            pos += per_second
            r = client.post("/documents", json={"documents": docs})
            ack = time.perf_counter() - started
            if r.status_code != 200:
                adds.append({"docs": 0, "ack_s": ack, "found": False, "error": r.text[:200]})
                continue
            probe = docs[0]
            hits = client.post("/search", json={"query": probe["text"][:1000], "k": 10, "text": False}).json()
            found = probe["id"] in [h["id"] for h in hits["results"][0]] and hits["version"] >= r.json()["version"]
            adds.append({"docs": len(docs), "ack_s": ack, "found": found})
            stop.wait(max(0.0, 1.0 - (time.perf_counter() - started)))


# -- the writer's cost ------------------------------------------------------------------------------------
def writer_cost(path: Path, overrides: list[str], extra: list[dict], per_add: int, adds: int) -> dict:
    """``adds`` adds of ``per_add`` documents, one after another with no reads, on a fresh copy of ``path``, with
    merges (the default ``index.merge_factor``) and without (``index.merge_factor=0``): each add's
    acknowledgement time and the server process's CPU seconds, as means over the first and the last ten."""
    out: dict = {"adds": adds, "docs_per_add": per_add}
    for name, extra_overrides in (("merges", []), ("no_merges", ["index.merge_factor=0"])):
        live = path.parent.parent / "live" / f"writer-{path.name}"
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(path, live)
        with Server(live, *overrides, *extra_overrides) as srv:
            srv.client.post("/search", json={"query": "warm", "k": 10})
            acks, cpus = [], []
            for i in range(adds):
                docs = [{"id": d["_id"], "title": d.get("title") or None, "text": d["text"] or "(empty)"}
                        for d in extra[i * per_add:(i + 1) * per_add]]
                cpu0, t0 = process_cpu_s(srv.proc.pid), time.perf_counter()
                srv.client.post("/documents", json={"documents": docs}).raise_for_status()
                acks.append(time.perf_counter() - t0)
                cpus.append(process_cpu_s(srv.proc.pid) - cpu0)
            segments = srv.client.get("/info").json().get("segments")
        out[name] = {"first_10": {"ack_ms": round(1000 * statistics.mean(acks[:10]), 1),
                                  "cpu_ms": round(1000 * statistics.mean(cpus[:10]), 1)},
                     "last_10": {"ack_ms": round(1000 * statistics.mean(acks[-10:]), 1),
                                 "cpu_ms": round(1000 * statistics.mean(cpus[-10:]), 1)},
                     "cpu_ms_mean": round(1000 * statistics.mean(cpus), 1), "segments_after": segments}
        print(f"  writer, {name}: {out[name]}", flush=True)
        shutil.rmtree(live, ignore_errors=True)
    return out


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_faults(args: argparse.Namespace, kind: str, path: Path, overrides: list[str], row: dict) -> None:
    fault_dir = args.work / "faults" / kind
    shutil.rmtree(fault_dir, ignore_errors=True)
    shutil.copytree(path, fault_dir)
    row["faults"] = faults(fault_dir, args.fault_trials, overrides)
    row["load_average_end"] = os.getloadavg()
    print(f"  faults: {json.dumps(row['faults'])}", flush=True)


def trained_overrides(checkpoint: Path) -> list[str]:
    """Build overrides for the plaid_trained kind: configs/colbert_scifact.yaml's model with ``checkpoint``
    (a train output folder: its ``final`` checkpoint)."""
    ckpt = checkpoint / "final" if (checkpoint / "final").is_dir() else checkpoint
    if not ckpt.is_dir():
        raise SystemExit(f"--checkpoint {checkpoint}: no such folder (a train output folder or its checkpoint)")
    return [f"model.name_or_path={ckpt}"]


def our_build_s(args: argparse.Namespace, corpus: Path, kind: str) -> float:
    """Wall seconds of our build of the served documents with ``kind``'s model and settings (plaid_trained:
    configs/colbert_scifact.yaml and --checkpoint), into a scratch folder, right before colbert-ai's."""
    if kind == "plaid_trained":
        if args.checkpoint is None:
            raise SystemExit("--peer-build with --peer-kind plaid_trained needs --checkpoint (the trained model)")
        config, overrides = str(REPO / "configs" / "colbert_scifact.yaml"), trained_overrides(args.checkpoint)
    else:
        config, overrides = None, KIND_OVERRIDES["plaid"]
    scratch = args.work / "peer_build" / kind
    started = time.perf_counter()
    embedctl.Index.build(corpus, scratch, config=config, overrides=overrides, overwrite=True)
    seconds = round(time.perf_counter() - started, 1)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"  our build of the same documents: {seconds} s", flush=True)
    return seconds


def rss_kb(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            fields[line.split(":")[0]] = int(line.split()[1])
    return {"rss_mib": round(fields.get("VmRSS", 0) / 1024, 1), "peak_rss_mib": round(fields.get("VmHWM", 0) / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=2000, help="index the first N documents (the rest feed the adds)")
    ap.add_argument("--kinds", default="plaid,dense")
    ap.add_argument("--requests", type=int, default=200, help="searches per concurrency level")
    ap.add_argument("--write-seconds", type=float, default=60.0,
                    help="length of each reads-during-writes phase (issue 32: 60; smaller for a quick run)")
    ap.add_argument("--adds-per-second", type=int, default=0,
                    help="documents the writer adds each second during reads_during_writes (0: 1%% of --docs, the "
                         "served collection; 52 is 1%% of all of SciFact's 5,183)")
    ap.add_argument("--writer-adds", type=int, default=60,
                    help="adds of 1%% of the documents, no reads, with and without merges: the writer's cost (0: skip)")
    ap.add_argument("--fault-kinds", default="dense", help="kinds to run the kill -9 loop on ('' for none)")
    ap.add_argument("--fault-trials", type=int, default=20, help="kill -9 rounds (issue 32: 20; fewer for a quick run)")
    ap.add_argument("--faults-only", action="store_true", help="only the kill -9 loop of --fault-kinds")
    ap.add_argument("--checkpoint", type=Path,
                    help="a trained ColBERT (a train output folder or its checkpoint): one more kind, plaid_trained, "
                         "built with configs/colbert_scifact.yaml's model settings and this model (in_process, load, "
                         "reads during writes)")
    ap.add_argument("--colbertai", action="store_true",
                    help="colbert-ai's Searcher in a loop on the --peer-kind's model and documents (peer kit venv)")
    ap.add_argument("--peer-kind", default="plaid", choices=["plaid", "plaid_trained"],
                    help="the PLAID kind whose index (documents and model) colbert-ai's Searcher runs on: plaid (minilm "
                         "as an untrained ColBERT) or plaid_trained (--checkpoint's model, the issue's)")
    ap.add_argument("--peer-build", action="store_true",
                    help="with --colbertai: also time our build of the same documents and model, right before "
                         "colbert-ai's (index wall ratio; plaid_trained needs --checkpoint)")
    ap.add_argument("--peer-only", action="store_true",
                    help="with --colbertai: only the peer, beside our in-process plaid search before and after it")
    ap.add_argument("--peer-rounds", type=int, default=0,
                    help="with --colbertai: colbert-ai's loop and our in-process loop over the same queries alternate "
                         "for N rounds, the peer's Searcher kept loaded (the same host load for both; the median of "
                         "the rounds' ratios is the comparison); with --reuse, the peer's index from an earlier run of "
                         "the same documents and model is reused too (unless --peer-build)")
    ap.add_argument("--colbertai-timeout", type=int, default=3600, help="seconds for colbert-ai's index + search")
    ap.add_argument("--peers-work", type=Path, default=DEFAULT_PEERS, help="the folder given to ../shared/peers/setup.sh")
    ap.add_argument("--window-ab-ms", type=float, default=25.0,
                    help="a second server with serve.batch_window_max_ms=MS beside the default one, interleaved in "
                         "the second pass of load (0: none)")
    ap.add_argument("--threads", type=int, default=0,
                    help="search.threads of the server and the in-process engine; 0 (default): the product's "
                         "default, one per core (on a LOADED 2-core host, 2 torch threads spin against each other: "
                         "one query 1.7-2.8 s vs 0.13 s with 1; there pass --threads 1)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "serve")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/serve.json)")
    ap.add_argument("--reuse", action="store_true", help="serve the indexes an earlier run left in --work (no build)")
    args = ap.parse_args()
    scifact = find_scifact(args.scifact)
    queries = test_queries(scifact)
    rows = corpus_rows(scifact)
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows[:args.docs]), encoding="utf-8")
    extra = rows[args.docs:]
    overrides = [f"search.threads={args.threads}"] if args.threads else []
    result: dict = {"docs": args.docs, "search_threads": args.threads or f"default ({os.cpu_count()}, one per core)", "queries": len(queries), "requests_per_level": args.requests,
                    "host_note": "load generator on the same cores as the server; host shared with other work",
                    "load_average": {"start": os.getloadavg()}, "kinds": {}}
    kinds = {k: KIND_OVERRIDES[k] for k in args.kinds.split(",") if k and not args.peer_only}
    if args.checkpoint is not None and not args.peer_only:
        kinds["plaid_trained"] = trained_overrides(args.checkpoint)
    for kind, build_overrides in kinds.items():
        path = args.work / "indexes" / kind
        if not args.reuse:
            config = str(REPO / "configs" / "colbert_scifact.yaml") if kind == "plaid_trained" else None
            embedctl.Index.build(corpus, path, config=config, overrides=build_overrides, overwrite=True)
        live = args.work / "live" / kind  # the server writes into a copy: --reuse starts from the same index
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(path, live)
        print(kind, flush=True)
        row: dict = {"load_average_start": os.getloadavg()}
        if args.faults_only:
            run_faults(args, kind, path, overrides, row)
            result["kinds"][kind] = row
            continue
        row["in_process"] = in_process(live, queries, min(100, args.requests), overrides)
        print(f"  in process: {row['in_process']}", flush=True)
        srv = Server(live, *overrides).start()
        other = (Server(path, *overrides, f"serve.batch_window_max_ms={args.window_ab_ms}").start()
                 if args.window_ab_ms else None)
        try:
            srv.client.post("/search", json={"query": queries[0], "k": 10})
            row["rss_open"] = rss_kb(srv.proc.pid)
            row["load"] = load_levels(srv, queries, args.requests, other)
            if other is not None:
                other.stop()
            row["rss_after_load"] = rss_kb(srv.proc.pid)
            row["reads_during_writes"] = reads_during_writes(srv, queries, extra, args.adds_per_second or
                                                             max(1, args.docs // 100), args.write_seconds)
            row["metrics_sample"] = [line for line in srv.client.get("/metrics").text.splitlines()
                                     if line.startswith(("embedctl_search_batch_queries_sum",
                                                         "embedctl_search_batch_queries_count",
                                                         "embedctl_commit_requests_sum", "embedctl_commits_total"))]
        finally:
            srv.stop()
            if other is not None:
                other.stop()
        if args.writer_adds:  # the documents after the ones reads_during_writes added
            row["writer_cost"] = writer_cost(path, overrides, extra[len(extra) // 2:], max(1, args.docs // 100),
                                             args.writer_adds)
        if kind in args.fault_kinds.split(","):
            run_faults(args, kind, path, overrides, row)
        row["load_average_end"] = os.getloadavg()
        result["kinds"][kind] = row
    peer_kind = args.peer_kind
    peer_index = args.work / "indexes" / peer_kind
    if args.peer_only:  # ours in process just before and after the peer: the same host load
        result["kinds"][peer_kind] = {"load_average_start": os.getloadavg(), "load_average_end": os.getloadavg(),
                                      "in_process": in_process(peer_index, queries, min(100, args.requests), overrides)}
    result["load_average"]["end"] = os.getloadavg()
    peak = max(v for k in result["kinds"].values() for v in (*k["load_average_start"], *k["load_average_end"]))
    result["host"] = ("quiet" if peak < 2 else f"loaded (load average up to {peak:.1f} on 2 cores: other engineers' "
                      "jobs; read ratios measured in this run, not absolute figures)")
    write_result("serve", result, args.out)
    if args.colbertai and peer_kind in result["kinds"]:  # last, written apart: its build may be long, or fail
        ours_build = our_build_s(args, corpus, peer_kind) if args.peer_build else None
        peer_queries, peer_work = queries[:min(100, args.requests)], args.work / "colbertai"
        if args.peer_rounds:
            peer = colbertai_interleaved(peer_index, rows[:args.docs], peer_queries, args.peers_work, peer_work,
                                         args.threads or os.cpu_count(), ours_loop(peer_index, overrides),
                                         args.peer_rounds, args.reuse and not args.peer_build, args.colbertai_timeout)
        else:
            peer = colbertai_searcher(peer_index, rows[:args.docs], peer_queries, args.peers_work, peer_work,
                                      args.threads or os.cpu_count(), args.colbertai_timeout)
        peer["load_average_end"] = os.getloadavg()
        ours = result["kinds"][peer_kind]
        if args.peer_only:
            peer["ours_in_process_after"] = in_process(peer_index, queries, min(100, args.requests), overrides)
        if ours_build is not None and "index_s" in peer:  # the index wall target: <= 0.25x colbert-ai's
            peer["ours_index_s"] = ours_build
            peer["index_wall_ours_over_colbertai"] = round(ours_build / peer["index_s"], 3)
        peer["ours_for_reference"] = {"in_process_one_at_a_time_qps": ours["in_process"]["one_at_a_time"]["qps"],
                                      "in_process_one_call_qps": ours["in_process"]["one_call_qps"],
                                      **({} if args.peer_only else {
                                          "server_1_client_qps": ours["load"]["second_pass"]["1"]["qps"],
                                          "server_16_clients_qps": ours["load"]["second_pass"]["16"]["qps"]})}
        result["colbertai_searcher"] = peer
        print(f"colbert-ai Searcher: {json.dumps(peer)[:800]}", flush=True)
        write_result("serve", result, args.out)


if __name__ == "__main__":
    main()
