"""Tiny real inputs for the hostile matrix (bench/trust_matrix.py): a SciFact slice as a BEIR folder and as
single files, a token cache of it, a dense index and a PLAID index (the bundled MiniLM, as ColBERT with a
16-dim projection), the same dense index grown by `index add` + `index delete` (commit files), a ranking,
pre-batched training data and a 2-step training run (checkpoints, final model). Built once per work folder
and reused when its `ready` marker is there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCIFACT = Path(os.environ.get("EMBEDCTL_SCIFACT", REPO.parent / "shared" / "data" / "scifact"))
if not (SCIFACT / "corpus.jsonl").is_file():
    SCIFACT = Path("/work/shared/data/scifact")
TINY = ["model.query_max_length=12", "model.doc_max_length=32"]
COLBERT = ["model.kind=colbert", "model.dim=16"]


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(REPO) + os.pathsep + out.get("PYTHONPATH", "")
    out.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               COLUMNS="400", DS_ACCELERATOR="cpu")
    out.pop("FORCE_COLOR", None)
    return out


def embedctl(*args: str, cwd: Path | None = None, timeout: int = 900) -> None:
    res = subprocess.run([sys.executable, "-m", "embedctl", *args], capture_output=True, text=True, env=env(),
                         cwd=cwd, timeout=timeout)
    if res.returncode:
        raise SystemExit(f"fixture step failed: embedctl {' '.join(args)}\n{res.stderr[-3000:]}")


def _rows(path: Path, n: int) -> list[dict]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line))
            if len(out) == n:
                break
    return out


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build(work: Path) -> dict[str, Path]:
    """Every fixture under ``work`` (made once); returns name -> path."""
    work.mkdir(parents=True, exist_ok=True)
    f = {name: work / rel for name, rel in {
        "beir": "beir", "corpus": "corpus.jsonl", "corpus_tsv": "corpus.tsv", "extra": "extra.jsonl",
        "queries": "queries.jsonl", "queries_tsv": "queries.tsv", "qrels": "qrels.txt", "qrels_beir": "beir/qrels/train.tsv",
        "cache": "cache", "indexes": "indexes", "dense": "indexes/dense", "plaid": "indexes/plaid",
        "grown": "indexes/grown", "run_tsv": "run.tsv", "batches": "batches", "train": "train_run",
        "victim": "victim", "model": "model", "trained": "indexes/trained"}.items()}
    if (work / "ready").exists():
        return f
    qrels_rows = [line.split("\t") for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    wanted_q = list(dict.fromkeys(q for q, _, _ in qrels_rows))[:8]
    wanted_d = {d for q, d, _ in qrels_rows if q in wanted_q}
    docs, extra = [], []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            r = {"_id": r["_id"], "title": r["title"], "text": r["text"][:240]}
            if r["_id"] in wanted_d or len(docs) < 24:
                docs.append(r)
            elif len(extra) < 6:
                extra.append(r)
            if len(docs) >= 24 + len(wanted_d) and len(extra) >= 6:
                break
    queries = [q for q in _rows(SCIFACT / "queries.jsonl", 2000) if q["_id"] in wanted_q]
    _write_jsonl(f["corpus"], docs)
    _write_jsonl(f["extra"], extra)
    f["corpus_tsv"].write_text("".join(f"{d['_id']}\t{d['text']}\n" for d in docs), encoding="utf-8")
    _write_jsonl(f["queries"], [{"_id": q["_id"], "text": q["text"]} for q in queries])
    f["queries_tsv"].write_text("".join(f"{q['_id']}\t{q['text']}\n" for q in queries), encoding="utf-8")
    f["qrels"].write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels_rows if q in wanted_q))
    (f["beir"] / "qrels").mkdir(parents=True, exist_ok=True)
    shutil.copy(f["corpus"], f["beir"] / "corpus.jsonl")
    shutil.copy(f["queries"], f["beir"] / "queries.jsonl")
    f["qrels_beir"].write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, d, g in qrels_rows if q in wanted_q))
    f["victim"].mkdir(exist_ok=True)
    (f["victim"] / "keep.txt").write_text("precious\n")
    embedctl("pretokenize", "--input", str(f["beir"]), "--output", str(f["cache"]), *TINY)
    embedctl("index", "--collection", str(f["corpus"]), "--root", str(f["indexes"]), "--name", "dense", "--kind",
             "dense", *TINY)
    embedctl("index", "--collection", str(f["corpus"]), "--root", str(f["indexes"]), "--name", "plaid", "--kind",
             "plaid", *TINY, *COLBERT)
    embedctl("index", "--collection", str(f["corpus"]), "--root", str(f["indexes"]), "--name", "grown", "--kind",
             "dense", *TINY)
    embedctl("index", "add", "--index", str(f["grown"]), "--collection", str(f["extra"]))
    embedctl("index", "delete", "--index", str(f["grown"]), "--id", docs[0]["_id"])
    embedctl("search", "--index", str(f["dense"]), "-q", str(f["queries"]), "-o", str(f["run_tsv"]), "-k", "10")
    sys.path.insert(0, str(REPO / "tests"))
    from support.trainhelpers import make_prebatched

    make_prebatched(f["batches"], n_batches=3, queries_per_batch=4)
    embedctl("train", "model.query_max_length=12", "model.doc_max_length=24", f"data.path={f['batches']}",
             f"output.dir={f['train']}", "train.max_steps=2", "train.save_every=1", "optim.lr=1e-4")
    shutil.copytree(f["train"] / "final", f["model"])
    embedctl("index", "--collection", str(f["corpus"]), "--root", str(f["indexes"]), "--name", "trained", "--kind",
             "dense", "--model", str(f["model"]), *TINY)
    (work / "ready").write_text("ok\n")
    return f
