"""PLAID candidate budgets: how many cells each query token probes, the stage-3 centroid threshold, and how
many candidates survive the centroid stages, chosen from the index and the query (issue 36).

Stanford ColBERT's table (:func:`table_params`: ncells 1/2/4, threshold 0.5/0.45/0.4, ndocs 256/1024/
max(4k, 4096) by k) was set on MS MARCO with a trained ColBERT: 2^18 cells of ~2,000 documents each, and
query tokens whose best centroid scores well above 0.5. On a small index (2,000 SciFact documents: 8,192
cells of ~28 documents) one cell per token reaches a sliver of what it reached there, and with an
untrained model 40% of the query tokens have no centroid scoring 0.5, so the threshold drops those tokens
from stage 3 altogether: 98.3% of exhaustive nDCG@10 at k=10. The adaptive budget (every key null):

- cells, per query token, by cumulative cluster size (WARP's t'): a token probes its best cells in score
  order until they hold ``probe_docs = ndocs_table(k) / 4`` documents (the stage-4 pool: each token alone
  could supply every exactly scored candidate), at least the table's ncells, at most ``MAX_CELLS``; on an
  index with MS MARCO-sized cells this is the table's one or two cells;
- threshold: the table's, lowered to the weakest query token's best centroid score, so that every query
  token's best centroid passes stage 3 whatever the model's score scale;
- ndocs: the table's, raised to a share of the live documents (``ndocs_share``: a small index's exact
  stage then sees a share of it, a large index keeps the table's figure).

Keys given explicitly (search.ncells / centroid_score_threshold / ndocs) win, one by one; the table stays
reachable by giving its three values.

Measured (bench/bench_budget.py -> bench/results/x86_64-avx2-2c/budget.json; minilm as an untrained ColBERT,
300 SciFact test queries, 1 thread, loaded host, ratios within one run), nDCG@10 as a share of exhaustive
MaxSim, adaptive vs table: 2,000 documents k=10 1.0000 vs 0.9827 (p50 2.45x the table's), k=100 1.0000 vs
1.0009 (1.18x); 5,183 documents k=10 1.0026 vs 1.0341 (2.37x), k=100 1.0000 vs 1.0073 (1.90x). The price is
stage 5's larger pool; ndocs alone is what the 2,000-document slice needed (adaptive cells and threshold
with the table's ndocs 256: 0.984; with ndocs 384: 0.991, from ad-hoc runs of the same
search outside budget.json).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedctl.index.plaid.reference import row_top

MAX_CELLS = 64  # a token never probes more cells than this (bounds stage 2's work on a huge index)
NDOCS_SHARE = 0.5  # adaptive ndocs: at least this share of the live documents ...
NDOCS_SHARE_CAP = 4  # ... but at most this many times the table's figure


def table_params(k: int) -> tuple[int, float, int]:
    """(ncells, centroid_score_threshold, ndocs) for k, as Stanford ColBERT picks them.

    >>> table_params(10), table_params(100), table_params(1000)
    ((1, 0.5, 256), (2, 0.45, 1024), (4, 0.4, 4096))
    """
    if k <= 10:
        return 1, 0.5, 256
    if k <= 100:
        return 2, 0.45, 1024
    return 4, 0.4, max(4 * k, 4096)


@dataclass
class Budget:
    """One query's budget: ``cells`` int [Lq] (cells probed by each query token), ``threshold``, ``ndocs``."""

    cells: np.ndarray
    threshold: float
    ndocs: int
    adaptive: tuple[str, ...] = ()  # the keys the rule chose (the others were given)

    def report(self) -> dict:
        c = self.cells
        return {"ncells": int(c.max()) if len(c) and c.min() == c.max() else
                {"min": int(c.min()), "mean": round(float(c.mean()), 2), "max": int(c.max())},
                "centroid_score_threshold": round(float(self.threshold), 4), "ndocs": int(self.ndocs),
                "adaptive": list(self.adaptive)}


def probe_limit(C: int, scale: int = 1) -> int:
    """The most cells a token may probe under the adaptive rule (:func:`cells_by_size`'s ``most``)."""
    return max(1, min(MAX_CELLS * scale, C))


def choose_budget(ST: np.ndarray, k: int, ivf_lengths: np.ndarray, live_docs: int, *, ncells: int | None = None,
                  threshold: float | None = None, ndocs: int | None = None, scale: int = 1,
                  ordered: np.ndarray | None = None) -> Budget:
    """The budget of one query with centroid scores ``ST`` [Lq, C] on an index whose cells hold
    ``ivf_lengths`` documents; ``scale`` (a filter's 1 / selectivity) multiplies the cells and ndocs.
    ``ordered``: each token's best cells, best first (ties to the smaller id), at least
    :func:`probe_limit` of them, when the caller has them (computed here otherwise)."""
    t_cells, t_thr, t_ndocs = table_params(k)
    C = ST.shape[1]
    adaptive = []
    if ncells is not None:
        cells = np.full(ST.shape[0], max(1, min(int(ncells) * scale, C)), dtype=np.int64)
    else:
        cells = cells_by_size(ST, ivf_lengths, scale * t_ndocs / 4, min(t_cells * scale, C), probe_limit(C, scale),
                              ordered=ordered)
        adaptive.append("ncells")
    if threshold is None:
        threshold = min(t_thr, float(ST.max(axis=1).min()))
        adaptive.append("centroid_score_threshold")
    if ndocs is None:
        ndocs = adaptive_ndocs(k, live_docs)
        adaptive.append("ndocs")
    ndocs = max(1, int(ndocs)) * (scale if "ndocs" in adaptive else 1)
    return Budget(cells, float(threshold), ndocs, tuple(adaptive))


def adaptive_ndocs(k: int, live_docs: int) -> int:
    """The adaptive ndocs of an unfiltered search: the table's, raised to ``NDOCS_SHARE`` of the live documents,
    at most ``NDOCS_SHARE_CAP`` times the table's."""
    t_ndocs = table_params(k)[2]
    return max(t_ndocs, min(int(np.ceil(NDOCS_SHARE * live_docs)), NDOCS_SHARE_CAP * t_ndocs))


def cells_by_size(ST: np.ndarray, ivf_lengths: np.ndarray, probe_docs: float, least: int, most: int,
                  ordered: np.ndarray | None = None) -> np.ndarray:
    """Per query token, how many of its best cells it takes for their documents to reach ``probe_docs``
    (WARP's cumulative cluster sizes), within [least, most]. ``ordered``: each token's best cells, best first
    (ties to the smaller id: embedctl.index.plaid.reference.row_top), at least ``most`` of them."""
    most = max(1, min(most, ST.shape[1]))
    least = max(1, min(least, most))
    ordered = row_top(ST, most) if ordered is None else ordered[:, :most]
    sizes = np.cumsum(ivf_lengths[ordered], axis=1)
    reach = (sizes < probe_docs).sum(axis=1) + 1  # cells until the cumulative size reaches probe_docs
    return np.clip(reach, least, most).astype(np.int64)
