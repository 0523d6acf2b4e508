"""Helpers for the training tests: a tiny pre-batched folder from SciFact train, tiny configs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import fsspec
import numpy as np

from support.datahelpers import scifact_dir

REPO = Path(__file__).resolve().parents[2]


def tiny_model_overrides(kind: str = "biencoder") -> list[str]:
    out = [f"model.kind={kind}", "model.query_max_length=12", "model.doc_max_length=24", "model.dropout=0"]
    if kind == "colbert":
        out += ["model.dim=16"]
    return out


def make_prebatched(dest: Path, *, n_batches: int = 3, queries_per_batch: int = 4, kind: str = "biencoder",
                    query_max_length: int = 12, doc_max_length: int = 24) -> Path:
    """Write ``n_batches`` batches of SciFact train queries, their positives and one negative per query
    (the next query's positive, labelled -1), tokenized by the real minilm tokenizer."""
    from embedctl.config.sections.model import ModelConfig
    from embedctl.data.batch_writer import write_batch
    from embedctl.data.batches import Batch
    from embedctl.data.formats import PREBATCH_FORMAT
    from embedctl.data.sources import iter_texts, join_title, read_queries
    from embedctl.models.tokenization import TextTokenizer
    from embedctl.util.qrels import read_qrels

    src = scifact_dir()
    qrels = {q: {d: g for d, g in docs.items() if g > 0}  # the relevant documents only
             for q, docs in read_qrels(str(src / "qrels" / "train.tsv")).items()}
    queries = read_queries(str(src / "queries.jsonl"))
    qids = [q for q in qrels if q in queries][: n_batches * queries_per_batch]
    wanted = {d for q in qids for d in qrels[q]}
    docs = {r.id: join_title(r) for r in iter_texts(str(src / "corpus.jsonl")) if r.id in wanted}
    tok = TextTokenizer(ModelConfig(kind=kind, query_max_length=query_max_length, doc_max_length=doc_max_length))
    fs, root = fsspec.core.url_to_fs(str(dest))
    meta = {"format": PREBATCH_FORMAT, "format_version": 1, "batches": []}
    for b in range(n_batches):
        bq = qids[b * queries_per_batch: (b + 1) * queries_per_batch]
        bd = list(dict.fromkeys(d for q in bq for d in qrels[q]))
        rel = np.zeros((len(bq), len(bd)), dtype=np.int8)
        for i, q in enumerate(bq):
            for d in qrels[q]:
                rel[i, bd.index(d)] = 1
            nxt = bq[(i + 1) % len(bq)]
            for d in qrels[nxt]:
                if rel[i, bd.index(d)] == 0:
                    rel[i, bd.index(d)] = -1
        q_tokens = [np.asarray(t, dtype=np.uint16) for t in tok.encode_queries([queries[q] for q in bq])]
        d_tokens = [np.asarray(t, dtype=np.uint16) for t in tok.encode_documents([docs[d] for d in bd])]
        batch = Batch(np.arange(len(bq), dtype=np.uint64), q_tokens, np.arange(len(bd), dtype=np.uint64),
                      d_tokens, rel)
        name = f"batch_{b:08d}"
        meta["batches"].append({"name": name, **write_batch(fs, f"{root}/{name}", batch)})
    with fs.open(f"{root}/metadata.json", "w") as fh:
        json.dump(meta, fh)
    return dest


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def train_in_process(overrides: list[str]) -> dict:
    from embedctl.config import load_config
    from embedctl.train.loop import run_training

    return run_training(load_config(None, overrides))


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
    return env


def python() -> str:
    return sys.executable
