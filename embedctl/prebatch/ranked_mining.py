"""Hard-negative mining in corpus chunks that any rank can score, merged in chunk order: 1 or N ranks, same result.

Chunk ``c`` is documents ``[c * chunk_docs, (c + 1) * chunk_docs)`` (never a function of the number of ranks).
For a chunk, every query is scored against its documents (bi-encoder: ``Q @ D^T``; ColBERT: exact MaxSim)
and the chunk keeps each query's ``depth`` best in the order *score descending, then document id
ascending*, plus the scores of the labelled positives it holds. Merging chunk lists in chunk order with a
stable sort gives the same order over the whole corpus, so ties are broken by document id wherever a
chunk was scored. One rank keeps the chunk lists in memory; several (embedctl.util.ranks) claim chunks,
write them under ``<output>/.mining/`` (a ``plan.json`` names what they were mined for: another request
starts over) and rank 0 merges them; a killed run's finished chunks are reused by the rerun, with any
number of ranks. Every rank encodes all the queries (the same batches on every rank).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.models.encoder import colbert_scores
from embedctl.util.io import load_npy, read_json, save_npy, write_json
from embedctl.util.ranks import Ranks

CHUNK_DOCS = 2048


def _scores(encoder, Q, items: list, batch_size: int):
    """float32 [nq, len(items)] scores of one document chunk."""
    import torch

    if encoder.kind == "biencoder":
        vectors = encoder.encode_documents(items, batch_size=batch_size, progress=True)
        return (Q @ torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).T).float()
    vectors, doclens = encoder.encode_documents(items, batch_size=batch_size, progress=True)
    width = max(1, int(doclens.max(initial=1)))
    D = torch.zeros((len(items), width, vectors.shape[1]))
    mask = torch.zeros((len(items), width), dtype=torch.bool)
    start = 0
    for i, n in enumerate(doclens.tolist()):
        D[i, :n] = torch.from_numpy(vectors[start:start + n])
        mask[i, :n] = True
        start += n
    return colbert_scores(Q, D, mask).float()


def best_first(scores, ids, k: int):
    """The ``k`` best of each row by (score descending, id ascending); ``ids`` ascending along each row."""
    import torch

    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.gather(scores, 1, order), torch.gather(ids, 1, order)


def plan_key(**what: Any) -> str:
    """What a set of chunk files was mined for (model, settings, inputs): another key starts over."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def mine_chunked(encoder, query_items: list, doc_items: list, positives: dict[int, dict[int, int]], n: int, *,
                 margin: float = 0.95, depth: int = 100, labelled: dict[int, set[int]] | None = None,
                 chunk_docs: int = CHUNK_DOCS, batch_size: int = 32, ranks: Ranks | None = None,
                 work: Path | None = None, key: str = "") -> dict[int, list[int]] | None:
    """``{query index: [doc index, ...]}`` best first (see embedctl.prebatch.mining.mine_negatives); None on the
    ranks other than 0. Several ranks need ``work``, a folder every rank sees."""
    import torch

    ranks = ranks or Ranks.single()
    nq, nd = len(query_items), len(doc_items)
    k = min(depth, nd)
    num_chunks = (nd + chunk_docs - 1) // chunk_docs
    pos_pairs = sorted((d, q) for q, docs in positives.items() for d in docs)
    pos_d = np.array([d for d, _ in pos_pairs], dtype=np.int64)
    pos_q = np.array([q for _, q in pos_pairs], dtype=np.int64)
    if ranks.world > 1:
        if work is None:
            raise EmbedctlError("mining on several ranks needs a local --output every rank can see",
                                hint="write the batches to a shared filesystem, or run one process")
        if ranks.is_lead:
            plan = work / "plan.json"
            try:
                same = read_json(plan, what="mining plan").get("key") == key
            except (FileNotFoundError, EmbedctlError, AttributeError):
                same = False
            if not same:
                shutil.rmtree(work, ignore_errors=True)
                write_json(plan, {"key": key, "num_chunks": num_chunks, "chunk_docs": chunk_docs})
        ranks.lead_decides("mining-work", "ready")
    parts: dict[int, tuple] = {}
    with torch.inference_mode():
        Q = torch.from_numpy(encoder.encode_queries(query_items))
        for c in ranks.claims("mining-chunks", num_chunks):
            files = [work / f"{c:06d}.{name}.npy" for name in ("top_ids", "pos", "top_scores")] if work else None
            if files and ranks.world > 1 and files[-1].is_file():
                continue
            lo, hi = c * chunk_docs, min(nd, (c + 1) * chunk_docs)
            S = _scores(encoder, Q, doc_items[lo:hi], batch_size)
            top_s, top_i = best_first(S, torch.arange(lo, hi).expand(nq, -1), min(k, hi - lo))
            sel = (pos_d >= lo) & (pos_d < hi)
            pos = S[torch.from_numpy(pos_q[sel]), torch.from_numpy(pos_d[sel] - lo)].numpy().astype(np.float32)
            if ranks.world == 1:
                parts[c] = (top_s, top_i, pos)
            else:  # the scores last: their file present means the chunk is done
                save_npy(files[0], top_i.numpy())
                save_npy(files[1], pos)
                save_npy(files[2], top_s.numpy())
    ranks.barrier("mining-chunks")
    if not ranks.is_lead:
        return None

    def chunk(c: int):
        if c in parts:
            return parts[c]
        return tuple(torch.from_numpy(np.array(load_npy(work / f"{c:06d}.{name}.npy", what="mined chunk")))
                     for name in ("top_scores", "top_ids", "pos"))

    top_s = torch.full((nq, 0), float("-inf"))
    top_i = torch.zeros((nq, 0), dtype=torch.long)
    pos_scores: dict[int, list[float]] = {q: [] for q in positives}
    for c in range(num_chunks):  # chunk order: equal scores keep ascending document ids
        s, i, pos = chunk(c)
        top_s, top_i = best_first(torch.cat([top_s, s], dim=1), torch.cat([top_i, i.long()], dim=1), k)
        lo, hi = c * chunk_docs, min(nd, (c + 1) * chunk_docs)
        sel = (pos_d >= lo) & (pos_d < hi)
        for q, value in zip(pos_q[sel].tolist(), np.asarray(pos).tolist(), strict=True):
            pos_scores[q].append(float(value))
    if work is not None and ranks.world > 1:
        shutil.rmtree(work, ignore_errors=True)  # merged: the chunk files are no longer needed
    out: dict[int, list[int]] = {}
    for q in range(nq):
        skip = (labelled or {}).get(q, set()) | set(positives.get(q, {}))
        ceiling = margin * min(pos_scores[q]) if pos_scores.get(q) else float("inf")
        picked = [int(d) for s, d in zip(top_s[q].tolist(), top_i[q].tolist(), strict=True)
                  if int(d) not in skip and s < ceiling]
        out[q] = picked[:n]
    return out
