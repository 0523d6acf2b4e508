"""Evaluation during training: exact search over a BEIR folder, metrics from embedctl.eval.metrics.

The corpus is encoded in chunks of ``CORPUS_CHUNK`` documents; only each query's running top ``depth``
is kept, so memory stays bounded. Bi-encoder: dot products. ColBERT: exact MaxSim over every document.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from embedctl.config.sections.train import EvalConfig
from embedctl.data.sources import beir_paths, iter_texts, join_title, read_queries
from embedctl.eval.io import read_qrels  # the same reader as `embedctl evaluate` (grades kept as given)
from embedctl.eval.metrics import evaluate_run
from embedctl.models.encode_backends import bulk_inference
from embedctl.models.encoder import colbert_scores

CORPUS_CHUNK = 2048
MEASURES = ("nDCG@10", "Recall@100", "MRR@10")


@dataclass
class EvalSet:
    """Texts and labels of one BEIR split (read once per run)."""

    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    docs: list[str]
    qrels: dict[str, dict[str, int]]


def load_eval_set(cfg: EvalConfig) -> EvalSet:
    """Read corpus, queries and qrels/<split>.tsv; keep judged queries (first ``max_queries`` in file order)."""
    corpus_path, queries_path, qrels_path = beir_paths(cfg.path, cfg.split)
    qrels = read_qrels(qrels_path)
    queries = {qid: text for qid, text in read_queries(queries_path).items() if qid in qrels}
    qids = list(queries)[: cfg.max_queries] if cfg.max_queries else list(queries)
    records = list(iter_texts(corpus_path, allow_empty=True))  # BEIR corpora hold empty documents
    return EvalSet(qids, [queries[q] for q in qids], [r.id for r in records], [join_title(r) for r in records],
                   {q: qrels[q] for q in qids})


def evaluate(encoder, data: EvalSet, batch_size: int, depth: int = 100) -> dict[str, float]:
    """Encode, search exactly, score. Returns {"eval/nDCG@10": ..., "eval/Recall@100": ..., "eval/MRR@10": ...}."""
    was_training = encoder.training
    encoder.eval()
    try:  # a large eval set on bf16 where auto would pick it (embedctl.models.encode_backends.bulk_inference)
        with bulk_inference(encoder, len(data.queries) + len(data.docs)):
            Q = encoder.encode_queries(data.queries, batch_size=batch_size)
            scores, idx = _search(encoder, Q, data.docs, batch_size, depth)
    finally:
        encoder.train(was_training)
    run = {qid: {data.doc_ids[j]: float(s) for j, s in zip(idx[i], scores[i], strict=True)} for i, qid in enumerate(data.query_ids)}
    metrics = evaluate_run(run, data.qrels, MEASURES)
    return {f"eval/{k}": float(v) for k, v in metrics.items()}


def _search(encoder, Q: np.ndarray, docs: list[str], batch_size: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Running top-``depth`` over corpus chunks: (scores [nq, k], doc indices [nq, k])."""
    q = torch.from_numpy(Q)
    best_s = torch.full((q.shape[0], 0), float("-inf"))
    best_i = torch.zeros((q.shape[0], 0), dtype=torch.long)
    for start in range(0, len(docs), CORPUS_CHUNK):
        chunk = docs[start: start + CORPUS_CHUNK]
        s = _chunk_scores(encoder, q, chunk, batch_size)
        best_s = torch.cat([best_s, s], dim=1)
        best_i = torch.cat([best_i, torch.arange(start, start + len(chunk)).expand(q.shape[0], -1)], dim=1)
        k = min(depth, best_s.shape[1])
        best_s, pos = best_s.topk(k, dim=1)
        best_i = best_i.gather(1, pos)
    return best_s.numpy(), best_i.numpy()


def _chunk_scores(encoder, q: torch.Tensor, chunk: list[str], batch_size: int) -> torch.Tensor:
    if q.ndim == 2:
        return q @ torch.from_numpy(encoder.encode_documents(chunk, batch_size=batch_size)).T

    vectors, doclens = encoder.encode_documents(chunk, batch_size=batch_size)
    vectors, doclens = torch.from_numpy(vectors), torch.from_numpy(doclens)
    out = []
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), doclens.cumsum(0)])
    for s in range(0, len(chunk), 256):
        lens = doclens[s: s + 256]
        D = torch.zeros(len(lens), int(lens.max()), vectors.shape[1])
        mask = torch.zeros(len(lens), int(lens.max()), dtype=torch.bool)
        for j, n in enumerate(lens.tolist()):
            D[j, :n] = vectors[offsets[s + j]: offsets[s + j] + n]
            mask[j, :n] = True
        out.append(colbert_scores(q, D, mask))
    return torch.cat(out, dim=1)
