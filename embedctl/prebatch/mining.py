"""Hard-negative mining by exact search over the whole corpus.

Bi-encoders search the dense index engine's exact inner-product index (`embedctl.index.dense`, faiss
Flat, built in memory chunk by chunk); ColBERT models score every document by exact MaxSim with a running
top-k (the quality reference PLAID itself is measured against).

For each query: score every document with the mining model, keep the ``depth`` best, drop labelled
documents, and take the top ``n`` whose score is below ``margin x`` the query's lowest positive score
(Arctic Embed / NV-Retriever style "positive-aware" mining, which avoids mining false negatives).

The corpus is encoded in chunks of ``chunk_docs``; positives' scores are taken from each chunk as it
passes, so the margin needs no second pass.

Example::

    negatives = mine_negatives(encoder, q_items, d_items, positives={0: {5: 1}}, n=4)
    negatives[0]  # [doc indices], best-scored first
"""

from __future__ import annotations

import numpy as np

from embedctl.index.dense import DenseBuilder
from embedctl.models.encoder import colbert_scores, load_encoder
from embedctl.prebatch.helper_models import helper_model_config, items_for


def _doc_scores(encoder, Q, items: list, batch_size: int, dense_index=None):
    """Scores [nq, len(items)] of one document chunk (a bi-encoder chunk is also added to ``dense_index``)."""
    import torch

    if encoder.kind == "biencoder":
        vectors = encoder.encode_documents(items, batch_size=batch_size, progress=True)
        dense_index.add(vectors)
        return Q @ torch.from_numpy(vectors).T
    vectors, doclens = encoder.encode_documents(items, batch_size=batch_size, progress=True)
    width = max(1, int(doclens.max(initial=1)))
    D = torch.zeros((len(items), width, vectors.shape[1]))
    mask = torch.zeros((len(items), width), dtype=torch.bool)
    start = 0
    for i, n in enumerate(doclens.tolist()):
        D[i, :n] = torch.from_numpy(vectors[start:start + n])
        mask[i, :n] = True
        start += n
    return colbert_scores(Q, D, mask)


def mine_negatives(encoder, query_items: list, doc_items: list, positives: dict[int, dict[int, int]], n: int, *,
                   margin: float = 0.95, depth: int = 100, labelled: dict[int, set[int]] | None = None,
                   chunk_docs: int = 2048, batch_size: int = 32) -> dict[int, list[int]]:
    """Mine up to ``n`` negatives per query.

    ``query_items`` / ``doc_items``: texts or token id lists the encoder accepts. ``positives[qi]`` maps
    document index -> grade for query index ``qi``; ``labelled[qi]`` are documents never to mine (its
    positives and known negatives). Returns ``{qi: [doc index, ...]}`` in descending score order.
    """
    import torch

    with torch.inference_mode():
        Q = torch.from_numpy(encoder.encode_queries(query_items))
        dense = DenseBuilder(Q.shape[1], "flat") if encoder.kind == "biencoder" else None
        nq, nd = len(query_items), len(doc_items)
        k = min(depth, nd)
        top_s = torch.full((nq, 0), float("-inf"))
        top_i = torch.zeros((nq, 0), dtype=torch.long)
        pos_scores: dict[int, list[float]] = {q: [] for q in positives}
        pos_by_doc: dict[int, list[int]] = {}
        for q, docs in positives.items():
            for d in docs:
                pos_by_doc.setdefault(d, []).append(q)
        for start in range(0, nd, chunk_docs):
            stop = min(start + chunk_docs, nd)
            S = _doc_scores(encoder, Q, doc_items[start:stop], batch_size, dense).float()
            for d in range(start, stop):
                for q in pos_by_doc.get(d, ()):
                    pos_scores[q].append(float(S[q, d - start]))
            if dense is None:  # ColBERT: running top-k of exact MaxSim scores
                idx = torch.arange(start, stop).expand(nq, -1)
                both_s, both_i = torch.cat([top_s, S], dim=1), torch.cat([top_i, idx], dim=1)
                best = torch.topk(both_s, min(k, both_s.shape[1]), dim=1)
                top_s, top_i = best.values, torch.gather(both_i, 1, best.indices)
        if dense is not None and nd:
            scores, pids = dense.finish().search(np.ascontiguousarray(Q.numpy(), dtype=np.float32), k)
            top_s, top_i = torch.from_numpy(scores), torch.from_numpy(pids)
    out: dict[int, list[int]] = {}
    for q in range(nq):
        skip = (labelled or {}).get(q, set()) | set(positives.get(q, {}))
        ceiling = margin * min(pos_scores[q]) if pos_scores.get(q) else float("inf")
        picked = [int(d) for s, d in zip(top_s[q].tolist(), top_i[q].tolist(), strict=True)
                  if int(d) not in skip and s < ceiling]
        out[q] = picked[:n]
    return out


def mine_labelled_negatives(loaded, labels, qids, q_index, d_index, q_tokens, d_tokens, qcache, console) -> int:
    """Add mined negatives (-1) to ``labels`` in place; returns how many were added."""
    p, model = loaded.cfg.prebatch, loaded.cfg.model
    encoder = load_encoder(helper_model_config(model, p.mine_model))
    console.print(f"mining {p.negatives_per_query} negatives per query with {encoder.model_cfg.name_or_path} "
                  f"({encoder.kind}) over {len(d_tokens):,} documents (exact search)", markup=False)
    q_items, d_items = items_for(encoder, model, [q_tokens[q_index[q]] for q in qids], d_tokens, qcache)
    positives = {i: {d_index[d]: r for d, r in labels[q].items() if r > 0} for i, q in enumerate(qids)}
    known = {i: {d_index[d] for d in labels[q]} for i, q in enumerate(qids)}
    mined = mine_negatives(encoder, q_items, d_items, positives, p.negatives_per_query, margin=p.mine_margin,
                           depth=p.mine_depth, labelled=known, batch_size=p.mine_batch_size)
    doc_ids = list(d_index)
    added = 0
    for i, q in enumerate(qids):
        for d in mined[i]:
            labels[q][doc_ids[d]] = -1
            added += 1
    return added
