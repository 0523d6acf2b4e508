"""bench_serve.py's peer row: colbert-ai 0.2.22's ``Searcher`` in a loop on the same model and documents as the
served PLAID index, in the peer kit's colbert venv (../shared/peers/setup.sh DIR; DIR/peers-work/venv-colbert),
run by bench/colbertai_serve_worker.py. The model is embedctl's encoder of that index exported in the Stanford
layout (embedctl.models.save_stanford), as bench_lifecycle_colbertai.py does. No venv: the row says so and how
to build it, nothing is measured in its place."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WORKER = Path(__file__).resolve().parent / "colbertai_serve_worker.py"
DEFAULT_PEERS = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers"))
KIT = Path(__file__).resolve().parents[2] / "shared" / "peers"


def colbertai_searcher(index: Path, rows: list[dict], queries: list[str], peers_work: Path, work: Path,
                       threads: int, timeout_s: int = 3600) -> dict:
    python = peers_work / "peers-work" / "venv-colbert" / "bin" / "python"
    if not python.is_file():
        return {"skipped": f"no colbert-ai venv at {python}: build it with {KIT}/setup.sh {peers_work} "
                           "(SKIP_FASTPLAID=1 for colbert-ai and PyLate only)"}
    import embedctl
    from embedctl.models.checkpoint import save_stanford

    work.mkdir(parents=True, exist_ok=True)
    encoder = embedctl.Index.open(index).session.encoder
    model = encoder.model_cfg  # the index's own model settings
    folder = work / "model-stanford"
    save_stanford(encoder, str(folder))
    texts = [" ".join(f"{r.get('title') or ''} {r['text']}".split()) for r in rows]
    spec = {"root": str(work / "colbertai"), "checkpoint": str(folder), "texts": texts, "queries": queries, "k": 10,
            "nbits": 2, "doc_maxlen": int(model.doc_max_length), "query_maxlen": int(model.query_max_length),
            "out": str(work / "colbertai_serve.json")}
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    Path(spec["out"]).unlink(missing_ok=True)
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
    out["model"] = f"embedctl's encoder of {index} ({model.name_or_path}, dim {model.dim}) via save_stanford"
    return out
