"""bench_serve.py's peer row: colbert-ai 0.2.22's ``Searcher`` in a loop on the same model and documents as the
served PLAID index, in the peer kit's colbert venv (../shared/peers/setup.sh DIR; DIR/peers-work/venv-colbert),
run by bench/colbertai_serve_worker.py. The model is embedctl's encoder of that index exported in the Stanford
layout (embedctl.models.save_stanford), as bench_lifecycle_colbertai.py does. No venv: the row says so and how
to build it, nothing is measured in its place.

:func:`colbertai_searcher` runs the peer's loop once; :func:`colbertai_interleaved` alternates the peer's loop
and ours over the same queries for several rounds (each engine first in every other round), so that both see
the same host load: the ratio of each round, and their median, are the comparison."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WORKER = Path(__file__).resolve().parent / "colbertai_serve_worker.py"
DEFAULT_PEERS = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers"))
KIT = Path(__file__).resolve().parents[2] / "shared" / "peers"


def _prepare(index: Path, rows: list[dict], queries: list[str], peers_work: Path, work: Path,
             **extra) -> tuple[Path, dict, Path, str] | dict:
    """(the venv's python, the worker's spec, its path, what the model is), or a row saying why not."""
    python = peers_work / "peers-work" / "venv-colbert" / "bin" / "python"
    if not python.is_file():
        return {"skipped": f"no colbert-ai venv at {python}: build it with {KIT}/setup.sh {peers_work} "
                           "(SKIP_FASTPLAID=1 for colbert-ai and PyLate only)"}
    import embedctl
    from embedctl.models.checkpoint import save_stanford

    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()  # the worker runs in `work`: every path it is given must not be relative to here
    encoder = embedctl.Index.open(index).session.encoder
    model = encoder.model_cfg  # the index's own model settings
    folder = work / "model-stanford"
    save_stanford(encoder, str(folder))
    texts = [" ".join(f"{r.get('title') or ''} {r['text']}".split()) for r in rows]
    spec = {"root": str(work / "colbertai"), "checkpoint": str(folder), "texts": texts, "queries": queries, "k": 10,
            "nbits": 2, "doc_maxlen": int(model.doc_max_length), "query_maxlen": int(model.query_max_length),
            "out": str(work / "colbertai_serve.json"), **extra}
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    Path(spec["out"]).unlink(missing_ok=True)
    return python, spec, spec_path, f"embedctl's encoder of {index} ({model.name_or_path}, dim {model.dim}) via save_stanford"


def colbertai_searcher(index: Path, rows: list[dict], queries: list[str], peers_work: Path, work: Path,
                       threads: int, timeout_s: int = 3600) -> dict:
    ready = _prepare(index, rows, queries, peers_work, work)
    if isinstance(ready, dict):
        return ready
    python, spec, spec_path, model = ready
    t0 = time.perf_counter()
    log = work / "worker.log"
    with open(log, "w") as f:
        try:
            rc = subprocess.run([str(python), str(WORKER), str(spec_path)], cwd=work, stdout=f, stderr=subprocess.STDOUT,
                                env={**ENV, "OMP_NUM_THREADS": str(threads)}, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    out = json.loads(Path(spec["out"]).read_text()) if rc == 0 else {
        "failed": f"worker rc={rc}", "log_tail": log.read_text(errors="replace")[-2000:]}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["model"] = model
    return out


def ours_loop(path: Path, overrides: list[str]):
    """``Index.search(q, 10)`` one query at a time over the queries it is given -> latencies in ms (the index
    opened and warmed once): our side of colbertai_interleaved's rounds, what in_process times."""
    import embedctl

    idx = embedctl.Index.open(path, overrides=overrides)
    idx.search("warm up", 10)

    def run(queries: list[str]) -> list[float]:
        lat = []
        for q in queries:
            t = time.perf_counter()
            idx.search(q, 10)
            lat.append(1000 * (time.perf_counter() - t))
        return lat
    return run


def _p50(lat_ms: list[float]) -> float:
    return round(statistics.median(lat_ms), 3)


def colbertai_interleaved(index: Path, rows: list[dict], queries: list[str], peers_work: Path, work: Path,
                          threads: int, ours: Callable[[list[str]], list[float]], rounds: int, reuse: bool,
                          timeout_s: int = 3600) -> dict:
    """``rounds`` rounds of colbert-ai's loop over ``queries`` and ``ours(queries)`` (our latencies in ms), the
    order alternating by round, colbert-ai's Searcher kept loaded in its worker between them. ``reuse``: the
    peer's index from an earlier run of the same documents and model is searched without indexing again."""
    ready = _prepare(index, rows, queries, peers_work, work, rounds=rounds, reuse=reuse)
    if isinstance(ready, dict):
        return ready
    python, spec, spec_path, model = ready
    t0, log = time.perf_counter(), work / "worker.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([str(python), str(WORKER), str(spec_path)], cwd=work, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=f, text=True,
                                env={**ENV, "OMP_NUM_THREADS": str(threads)})

        watchdog = threading.Timer(timeout_s, proc.kill)  # a silent hang ends the readline below too
        watchdog.start()

        def peer_line(prefix: str) -> str:
            """The worker's next line starting with prefix (its other prints go to the log)."""
            while True:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"colbert-ai's worker ended (rc={proc.wait()}; killed after {timeout_s} s "
                                       f"if it ran that long); see {log}")
                if line.startswith(prefix):
                    return line[len(prefix):]
                f.write(line)

        def peer_round() -> list[float]:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            return json.loads(peer_line("ROUND "))["lat_ms"]

        try:
            peer_line("READY")
            out = json.loads(Path(spec["out"]).read_text())
            rows_out = []
            for r in range(rounds):
                if r % 2 == 0:
                    peer_ms = peer_round()
                    ours_ms = ours(queries)
                else:
                    ours_ms = ours(queries)
                    peer_ms = peer_round()
                rows_out.append({"first": "colbert-ai" if r % 2 == 0 else "ours", "colbertai_p50_ms": _p50(peer_ms),
                                 "ours_p50_ms": _p50(ours_ms), "ours_over_colbertai": round(_p50(ours_ms) / _p50(peer_ms), 3)})
            proc.stdin.write("end\n")
            proc.stdin.close()
            proc.wait(timeout=60)
        except Exception as exc:  # a failed peer is a row saying so, never a figure
            proc.kill()
            return {"failed": str(exc), "log_tail": log.read_text(errors="replace")[-2000:], "model": model}
        finally:
            watchdog.cancel()
    ratios = [r["ours_over_colbertai"] for r in rows_out]
    out.update({"rounds": rows_out, "ours_over_colbertai_median": round(statistics.median(ratios), 3),
                "ours_over_colbertai_range": [min(ratios), max(ratios)], "requests_per_round": len(queries),
                "wall_s": round(time.perf_counter() - t0, 1), "model": model,
                "how": "colbert-ai's Searcher.search and our Index.search, one query at a time, k=10, the same "
                       "queries, the two alternating in rounds (each first in every other round)"})
    return out
