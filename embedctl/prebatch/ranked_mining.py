"""Hard-negative mining in query chunks and corpus chunks that any rank can do, merged in chunk order: 1 or N
ranks, same result.

Query chunk ``j`` is queries ``[j * query_chunk, (j + 1) * query_chunk)`` and corpus chunk ``c`` documents
``[c * chunk_docs, (c + 1) * chunk_docs)`` (both sizes fixed, never a function of the number of ranks).
First the ranks claim query chunks and encode each once (several ranks: ``queries.{j}.npy`` under the work
folder, float32; one rank keeps them in memory). Then they claim corpus chunks: a chunk's documents are
encoded once and scored against the queries one query chunk at a time (bi-encoder: ``Q @ D^T``; ColBERT:
exact MaxSim), so a rank holds at most ``query_chunk x chunk_docs`` scores whatever the number of queries.
For each query the chunk keeps its ``depth`` best in the order *score descending, then document id
ascending*, plus the scores of the labelled positives it holds. Merging chunk lists in chunk order with a
stable sort gives the same order over the whole corpus, so ties are broken by document id wherever a
chunk was scored. Several ranks (embedctl.util.ranks) write chunk lists under ``<output>/.mining/`` (a
``plan.json`` names what they were mined for: another request starts over) and rank 0 merges them; one
rank merges each chunk as it is scored. A killed run's finished chunks (queries and corpus) are reused by
the rerun, with any number of ranks, one included.
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

CHUNK_DOCS = 2048  # documents per corpus chunk (prebatch.mine_chunk_docs)
QUERY_CHUNK = 2048  # queries per query chunk, and per scoring block (prebatch.mine_query_chunk)
_PARTS = ("top_ids", "pos", "top_scores")  # a corpus chunk's files, the scores last: present = chunk done


def _load(path: Path, what: str) -> np.ndarray:
    """A work file read back whole; a damaged one names the folder to delete (the rerun redoes its chunks)."""
    return np.array(load_npy(path, what=what, hint=f"delete {path.parent} (unfinished mining) and rerun the command"))


def _documents(encoder, items: list, batch_size: int):
    """One corpus chunk encoded for scoring: bi-encoder float32 [n, dim]; ColBERT (D [n, L, dim], mask [n, L])."""
    import torch

    if encoder.kind == "biencoder":
        vectors = encoder.encode_documents(items, batch_size=batch_size, progress=True)
        return torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    vectors, doclens = encoder.encode_documents(items, batch_size=batch_size, progress=True)
    width = max(1, int(doclens.max(initial=1)))
    D = torch.zeros((len(items), width, vectors.shape[1]))
    mask = torch.zeros((len(items), width), dtype=torch.bool)
    start = 0
    for i, n in enumerate(doclens.tolist()):
        D[i, :n] = torch.from_numpy(vectors[start:start + n])
        mask[i, :n] = True
        start += n
    return D, mask


def _scores(Q, docs):
    """float32 [len(Q), documents] scores of one query block against one encoded corpus chunk."""
    if isinstance(docs, tuple):
        return colbert_scores(Q, *docs).float()
    return (Q @ docs.T).float()


def best_first(scores, ids, k: int):
    """The ``k`` best of each row by (score descending, id ascending); ``ids`` ascending along each row."""
    import torch

    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.gather(scores, 1, order), torch.gather(ids, 1, order)


def plan_key(**what: Any) -> str:
    """What a set of chunk files was mined for (model, settings, inputs): another key starts over."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _start_work(work: Path | None, plan: dict, ranks: Ranks) -> bool:
    """Rank 0 keeps ``work`` when its plan.json is ``plan`` (a killed run's chunks are reused), else clears
    it; several ranks then create it. Returns whether chunk files may be read from ``work``."""
    if work is None:
        return False
    if ranks.is_lead:
        try:
            same = read_json(work / "plan.json", what="mining plan") == plan
        except (FileNotFoundError, EmbedctlError):
            same = False
        if not same:
            shutil.rmtree(work, ignore_errors=True)
            if ranks.world > 1:
                write_json(work / "plan.json", plan)
    ranks.lead_decides("mining-work", "ready")
    return work.is_dir()


class _QueryVectors:
    """The query vectors by query chunk: encoded here and kept (one rank), or read back from the work folder."""

    def __init__(self, encoder, items: list, size: int, ranks: Ranks, work: Path | None, reuse: bool):
        self.items, self.size, self.work = items, size, work
        self.count = (len(items) + size - 1) // size
        self.kept: dict[int, np.ndarray] = {}
        for j in ranks.claims("mining-queries", self.count):
            path = self.path(j)
            if reuse and path.is_file():
                if ranks.world == 1:
                    self.kept[j] = _load(path, "mining query vectors")
                continue
            vectors = encoder.encode_queries(items[j * size:(j + 1) * size])
            if ranks.world == 1:
                self.kept[j] = vectors
            else:
                save_npy(path, vectors)
        ranks.barrier("mining-queries")

    def path(self, j: int) -> Path:
        return self.work / f"queries.{j:06d}.npy" if self.work is not None else Path()

    def block(self, j: int):
        """float32 tensor of query chunk ``j``: [n, dim], ColBERT [n, Lq, dim]."""
        import torch

        if j in self.kept:
            return torch.from_numpy(self.kept[j])
        return torch.from_numpy(_load(self.path(j), "mining query vectors"))


def _score_chunk(encoder, queries: _QueryVectors, doc_items: list, lo: int, hi: int, k: int, pos_q, pos_d,
                 batch_size: int):
    """(top scores [nq, k'], top ids [nq, k'], positive scores in (document, query) order) of one corpus chunk;
    queries are scored one query chunk at a time."""
    import torch

    docs = _documents(encoder, doc_items[lo:hi], batch_size)
    ids = torch.arange(lo, hi)
    sel = (pos_d >= lo) & (pos_d < hi)
    chunk_q, chunk_d = pos_q[sel], pos_d[sel] - lo
    pos = np.zeros(len(chunk_q), dtype=np.float32)
    tops_s, tops_i = [], []
    for j in range(queries.count):
        qlo = j * queries.size
        S = _scores(queries.block(j), docs)
        s, i = best_first(S, ids.expand(len(S), -1), min(k, hi - lo))
        tops_s.append(s)
        tops_i.append(i)
        here = (chunk_q >= qlo) & (chunk_q < qlo + len(S))
        pos[here] = S[torch.from_numpy(chunk_q[here] - qlo), torch.from_numpy(chunk_d[here])].numpy()
        del S
    if not tops_s:  # no queries
        return torch.zeros((0, 0)), torch.zeros((0, 0), dtype=torch.long), pos
    return torch.cat(tops_s), torch.cat(tops_i), pos


def mine_chunked(encoder, query_items: list, doc_items: list, positives: dict[int, dict[int, int]], n: int, *,
                 margin: float = 0.95, depth: int = 100, labelled: dict[int, set[int]] | None = None,
                 chunk_docs: int = CHUNK_DOCS, query_chunk: int = QUERY_CHUNK, batch_size: int = 32,
                 ranks: Ranks | None = None, work: Path | None = None, key: str = "") -> dict[int, list[int]] | None:
    """``{query index: [doc index, ...]}`` best first (see embedctl.prebatch.mining.mine_negatives); None on the
    ranks other than 0. Several ranks need ``work``, a folder every rank sees (one rank reuses what a killed
    run left there)."""
    import torch

    ranks = ranks or Ranks.single()
    nq, nd = len(query_items), len(doc_items)
    k = min(depth, nd)
    num_chunks = (nd + chunk_docs - 1) // chunk_docs
    pos_pairs = sorted((d, q) for q, docs in positives.items() for d in docs)
    pos_d = np.array([d for d, _ in pos_pairs], dtype=np.int64)
    pos_q = np.array([q for _, q in pos_pairs], dtype=np.int64)
    if ranks.world > 1 and work is None:
        raise EmbedctlError("mining on several ranks needs a local --output every rank can see",
                            hint="write the batches to a shared filesystem (--output), or run one process")
    plan = {"key": key, "num_queries": nq, "query_chunk": query_chunk, "num_docs": nd, "chunk_docs": chunk_docs}
    reuse = _start_work(work, plan, ranks)

    def files(c: int) -> list[Path]:
        return [work / f"{c:06d}.{name}.npy" for name in _PARTS] if work is not None else []

    with torch.inference_mode():
        queries = _QueryVectors(encoder, query_items, query_chunk, ranks, work, reuse)

        def scored(c: int):
            lo, hi = c * chunk_docs, min(nd, (c + 1) * chunk_docs)
            return _score_chunk(encoder, queries, doc_items, lo, hi, k, pos_q, pos_d, batch_size)

        if ranks.world > 1:
            for c in ranks.claims("mining-chunks", num_chunks):
                if not files(c)[-1].is_file():
                    top_s, top_i, pos = scored(c)
                    for path, array in zip(files(c), (top_i.numpy(), pos, top_s.numpy()), strict=True):
                        save_npy(path, array)
            ranks.barrier("mining-chunks")
            if not ranks.is_lead:
                return None

        def chunk(c: int):
            if ranks.world == 1 and not (reuse and files(c)[-1].is_file()):
                return scored(c)
            top_i, pos, top_s = (_load(path, "mined chunk") for path in files(c))
            return torch.from_numpy(top_s), torch.from_numpy(top_i).long(), pos

        top_s = torch.full((nq, 0), float("-inf"))
        top_i = torch.zeros((nq, 0), dtype=torch.long)
        pos_scores: dict[int, list[float]] = {q: [] for q in positives}
        for c in range(num_chunks):  # chunk order: equal scores keep ascending document ids
            s, i, pos = chunk(c)
            top_s, top_i = best_first(torch.cat([top_s, s], dim=1), torch.cat([top_i, i], dim=1), k)
            lo, hi = c * chunk_docs, min(nd, (c + 1) * chunk_docs)
            sel = (pos_d >= lo) & (pos_d < hi)
            for q, value in zip(pos_q[sel].tolist(), np.asarray(pos).tolist(), strict=True):
                pos_scores[q].append(float(value))
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)  # merged: the chunk files are no longer needed
    out: dict[int, list[int]] = {}
    for q in range(nq):
        skip = (labelled or {}).get(q, set()) | set(positives.get(q, {}))
        ceiling = margin * min(pos_scores[q]) if pos_scores.get(q) else float("inf")
        picked = [int(d) for s, d in zip(top_s[q].tolist(), top_i[q].tolist(), strict=True)
                  if int(d) not in skip and s < ceiling]
        out[q] = picked[:n]
    return out
