"""Hard-negative mining by exact search over the whole corpus.

Bi-encoders score every document by exact inner product, ColBERT models by exact MaxSim (the quality
reference PLAID itself is measured against), chunk by chunk, keeping each chunk's best in the order score
descending then document id (embedctl.prebatch.ranked_mining: ties never depend on chunks or ranks).

For each query: score every document with the mining model, keep the ``depth`` best, drop labelled
documents, and take the top ``n`` whose score is below ``margin x`` the query's lowest positive score
(Arctic Embed / NV-Retriever style "positive-aware" mining, which avoids mining false negatives).

The queries are encoded in chunks of ``query_chunk``, the corpus in chunks of ``chunk_docs``, and a corpus
chunk is scored one query chunk at a time (memory: ``query_chunk x chunk_docs`` scores); positives' scores
are taken from each chunk as it passes, so the margin needs no second pass.

Example::

    negatives = mine_negatives(encoder, q_items, d_items, positives={0: {5: 1}}, n=4)
    negatives[0]  # [doc indices], best-scored first
"""

from __future__ import annotations

from pathlib import Path

from embedctl.models.encoder import load_encoder
from embedctl.prebatch.helper_models import helper_model_config, items_for
from embedctl.prebatch.ranked_mining import CHUNK_DOCS, QUERY_CHUNK, mine_chunked, plan_key
from embedctl.util.ranks import Ranks


def mine_negatives(encoder, query_items: list, doc_items: list, positives: dict[int, dict[int, int]], n: int, *,
                   margin: float = 0.95, depth: int = 100, labelled: dict[int, set[int]] | None = None,
                   chunk_docs: int = CHUNK_DOCS, query_chunk: int = QUERY_CHUNK, batch_size: int = 32
                   ) -> dict[int, list[int]]:
    """Mine up to ``n`` negatives per query.

    ``query_items`` / ``doc_items``: texts or token id lists the encoder accepts. ``positives[qi]`` maps
    document index -> grade for query index ``qi``; ``labelled[qi]`` are documents never to mine (its
    positives and known negatives). Returns ``{qi: [doc index, ...]}`` in descending score order.
    """
    return mine_chunked(encoder, query_items, doc_items, positives, n, margin=margin, depth=depth, labelled=labelled,
                        chunk_docs=chunk_docs, query_chunk=query_chunk, batch_size=batch_size)


def mine_labelled_negatives(loaded, labels, qids, q_index, d_index, q_tokens, d_tokens, qcache, console,
                            ranks: Ranks | None = None) -> int:
    """Add mined negatives (-1) to ``labels`` in place; returns how many were added (0 on ranks other than 0,
    which score the corpus chunks they claim: embedctl.prebatch.ranked_mining)."""
    p, model = loaded.cfg.prebatch, loaded.cfg.model
    encoder = load_encoder(helper_model_config(model, p.mine_model), texts=len(d_tokens) + len(qids))
    console.print(f"mining {p.negatives_per_query} negatives per query with {encoder.model_cfg.name_or_path} "
                  f"({encoder.kind}) over {len(d_tokens):,} documents (exact search)", markup=False)
    q_items, d_items = items_for(encoder, model, [q_tokens[q_index[q]] for q in qids], d_tokens, qcache)
    positives = {i: {d_index[d]: r for d, r in labels[q].items() if r > 0} for i, q in enumerate(qids)}
    known = {i: {d_index[d] for d in labels[q]} for i, q in enumerate(qids)}
    ranks = ranks or Ranks.single()
    local = "://" not in p.output or p.output.startswith("file://")
    key = plan_key(model=encoder.model_cfg, prebatch=p, queries=qcache.fingerprint, docs=len(d_items), qids=qids)
    mined = mine_chunked(encoder, q_items, d_items, positives, p.negatives_per_query, margin=p.mine_margin,
                         depth=p.mine_depth, labelled=known, chunk_docs=p.mine_chunk_docs,
                         query_chunk=p.mine_query_chunk, batch_size=p.mine_batch_size, ranks=ranks,
                         work=Path(p.output.removeprefix("file://")) / ".mining" if local else None, key=key)
    if mined is None:
        return 0
    doc_ids = list(d_index)
    added = 0
    for i, q in enumerate(qids):
        for d in mined[i]:
            labels[q][doc_ids[d]] = -1
            added += 1
    return added
