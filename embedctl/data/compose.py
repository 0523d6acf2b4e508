"""Batch composition for prebatch: which queries share a batch, and the split-safe document layout.

Layout: documents are stored grouped after their queries' order - query 0's labelled documents
(positives by descending grade, then negatives), then query 1's not yet stored, and so on - so that
``split_batch`` at query boundaries keeps each query with all its positives and negatives.

Example::

    groups = compose_queries(["q1", "q2", "q3"], labels, per_batch=2, seed=0, false_negatives="group")
    batch = assemble(groups[0], labels, false_negatives="group")   # (query ids, doc ids, relevance)
"""

from __future__ import annotations

import numpy as np


def positives_of(labels: dict[str, dict[str, int]], qid: str) -> set[str]:
    return {d for d, r in labels[qid].items() if r > 0}


def compose_queries(qids: list[str], labels: dict[str, dict[str, int]], per_batch: int, seed: int,
                    false_negatives: str = "group") -> list[list[str]]:
    """Seeded split of ``qids`` into batches of ``per_batch`` queries.

    ``false_negatives="group"``: a query never joins a batch holding another query with a shared positive
    (it waits for a later batch; deferred queries are tried first). Otherwise batches are plain slices
    of the seeded permutation. The last batch may be smaller.
    """
    order = [qids[i] for i in np.random.default_rng(seed).permutation(len(qids))]
    if false_negatives != "group":
        return [order[i:i + per_batch] for i in range(0, len(order), per_batch)]
    batches: list[list[str]] = []
    waiting: list[str] = []
    rest = iter(order)
    exhausted = False
    while waiting or not exhausted:
        batch, used, carry = [], set(), []
        candidates = list(waiting)
        while len(batch) < per_batch:
            if candidates:
                q = candidates.pop(0)
            else:
                q = next(rest, None)
                if q is None:
                    exhausted = True
                    break
            pos = positives_of(labels, q)
            if pos & used:
                carry.append(q)
            else:
                batch.append(q)
                used.update(pos)
        waiting = carry + candidates
        if batch:
            batches.append(batch)
    return batches


def assemble(qids: list[str], labels: dict[str, dict[str, int]], false_negatives: str = "group"
             ) -> tuple[list[str], list[str], np.ndarray]:
    """(query ids, document ids in split-safe order, relevance int8 [Q, D]) for one batch.

    Every known label between any query and any document of the batch is kept (a document labelled
    for two queries is stored once, labelled for both). ``false_negatives="mark"``: when two queries
    share a positive, each one's other positives are marked relevant (1) for the other too, unless
    that pair already has a label.
    """
    docs: list[str] = []
    where: dict[str, int] = {}
    for q in qids:
        ranked = sorted(labels[q].items(), key=lambda kv: (kv[1] < 0, -kv[1]))  # positives by grade, then negatives
        for d, _ in ranked:
            if d not in where:
                where[d] = len(docs)
                docs.append(d)
    rel = np.zeros((len(qids), len(docs)), dtype=np.int8)
    for i, q in enumerate(qids):
        for d, r in labels[q].items():
            rel[i, where[d]] = max(-128, min(127, r))
    if false_negatives == "mark":
        pos = [positives_of(labels, q) for q in qids]
        for i in range(len(qids)):
            for j in range(len(qids)):
                if i != j and pos[i] & pos[j]:
                    for d in pos[j] - set(labels[qids[i]]):
                        rel[i, where[d]] = 1
    return qids, docs, rel
