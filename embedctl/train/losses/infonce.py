"""InfoNCE over a query x document relevance matrix (bi-encoder dot products or ColBERT MaxSim).

Relevance semantics (the pre-batched format): ``> 0`` relevant, ``< 0`` known irrelevant, ``0`` unknown.
With in-batch negatives on, unknown pairs count as negatives (0 -> -1); otherwise they are masked.

Softmax rows (``positives``, the config key ``train.positives``):
- ``each``: every (query, positive document) pair is a row: the candidates are that positive and every
  document labelled negative for the query; the query's *other* positives are masked out. A query with k
  positives contributes k rows, whatever the other queries look like (Arctic Embed decides whether to
  expand rows by comparing counts, which misaligns rows when one query has 2 positives and another has none).
- ``first``: one row per query, its first positive in the batch's document order (one positive per
  training example, as in colbert-ai's and PyLate's triples); its other positives are masked out.
- ``any``: one row per query whose numerator holds all its positives: -log(sum_pos e^s / sum_cand e^s).
Queries without any positive contribute nothing and are counted in :class:`LossStats`, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from embedctl.models.encoder import colbert_scores

ScoreFn = Callable[..., torch.Tensor]
"""(q_rows [n, ...], d [D, ...], rows=LongTensor [n] of query indices) -> scores [n, D]."""


@dataclass
class LossStats:
    """What went into one loss value (for logging and for the 'skipped queries' warning)."""

    rows: int
    """Softmax rows = (query, positive) pairs."""
    queries: int
    """Queries in the batch."""
    queries_without_positive: int
    """Queries that had no positive document and were skipped."""
    parts: dict[str, float] = field(default_factory=dict)
    """The terms of a combined loss (``infonce``, ``distill``), logged as loss/<name>."""


def dot_scores(q: torch.Tensor, d: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Bi-encoder scores: q [n, dim], d [m, dim] -> [n, m] dot products (``rows`` unused)."""
    return q @ d.T


def maxsim_scorer(doc_mask: torch.Tensor, query_mask: torch.Tensor | None = None) -> ScoreFn:
    """ColBERT scorer closing over the masks: (Q [n, Lq, dim], D [m, Ld, dim]) -> [n, m] MaxSim scores.

    Query token vectors where ``query_mask`` is False (padding without query augmentation) are zeroed,
    so they add nothing; ``doc_mask`` [m, Ld] is passed to the models' ``colbert_scores``.
    """
    def score(q: torch.Tensor, d: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        if query_mask is not None:
            qm = query_mask if rows is None else query_mask[rows]
            q = q * qm.unsqueeze(-1).to(q.dtype)
        return colbert_scores(q, d, doc_mask)

    return score


POSITIVE_MODES = ("each", "first", "any")


def expand_positive_rows(relevance: torch.Tensor, positives: str = "each") -> tuple[torch.Tensor, torch.Tensor]:
    """(query index, positive document index) of each softmax row, row-major order.

    relevance [Q, D] (any integer or float dtype) -> two LongTensors [P]: every positive pair (``each``), or
    each query's first positive (``first``, ``any``: ``any`` puts the query's other positives in the row's
    numerator, see :func:`numerator_mask`).
    Example: [[1, 1, -1], [0, -1, 0]] -> (tensor([0, 0]), tensor([0, 1])); with "first": (tensor([0]), tensor([0])).
    """
    if positives not in POSITIVE_MODES:
        raise ValueError(f"positives must be one of {POSITIVE_MODES}, got {positives!r}")
    pos = (relevance > 0).nonzero(as_tuple=False)
    if positives != "each" and len(pos):
        first = torch.ones(len(pos), dtype=torch.bool, device=pos.device)
        first[1:] = pos[1:, 0] != pos[:-1, 0]  # nonzero() is row-major: a query's pairs are adjacent
        pos = pos[first]
    return pos[:, 0], pos[:, 1]


def numerator_mask(relevance: torch.Tensor, row_query: torch.Tensor, positives: str) -> torch.Tensor | None:
    """Bool [P, D] of the documents in each row's numerator for ``any`` (all the query's positives); None
    for ``each`` / ``first``, whose numerator is the row's one positive (a plain cross-entropy)."""
    return relevance[row_query] > 0 if positives == "any" else None


def row_mask(relevance: torch.Tensor, row_query: torch.Tensor, row_doc: torch.Tensor, in_batch_negatives: bool,
             positives: str = "each"):
    """Bool [P, D]: True where a candidate takes part in the row's softmax.

    Candidates: the row's positive document (``any``: every positive of the row's query), and every document
    with relevance < 0 for the row's query (or == 0 too when ``in_batch_negatives``). Otherwise other
    positives of the same query are masked.
    """
    rel = relevance[row_query]
    keep = rel < 0
    if in_batch_negatives:
        keep = keep | (rel == 0)
    if positives == "any":
        keep = keep | (rel > 0)
    keep = keep.clone()
    keep[torch.arange(len(row_doc), device=rel.device), row_doc] = True
    return keep


def info_nce_loss(
    q: torch.Tensor,
    d: torch.Tensor,
    relevance: torch.Tensor,
    *,
    temperature: float = 0.02,
    in_batch_negatives: bool = True,
    chunk_size: int | None = None,
    score_fn: ScoreFn | None = None,
    positives: str = "each",
) -> tuple[torch.Tensor, LossStats]:
    """Mean cross-entropy over the softmax rows (one per positive pair, or per query: ``positives``).

    Inputs:
        q: query embeddings [Q, dim] (bi-encoder) or [Q, Lq, dim] (ColBERT, with a MaxSim ``score_fn``).
        d: document embeddings [D, dim] or [D, Ld, dim].
        relevance: [Q, D] integer labels, >0 positive, <0 negative, 0 unknown.
        temperature: scores are divided by it.
        in_batch_negatives: 0 entries count as negatives (else masked).
        chunk_size: compute rows in chunks of this size, each chunk recomputed in backward
            (activation checkpointing), so memory is O(chunk_size x D) instead of O(P x D).
        score_fn: (q_rows, d, rows=) -> [n, D]; default dot products; ``rows`` holds the query index
            of each row (a ColBERT scorer uses it to pick query masks).
        positives: ``each`` | ``first`` | ``any`` (module docstring).
    Returns: (scalar loss, LossStats). With no positive in the whole batch the loss is 0 with a graph
        (so backward works) and stats.rows == 0.

    Example:
        >>> q = F.normalize(torch.randn(2, 8), dim=-1); d = F.normalize(torch.randn(3, 8), dim=-1)
        >>> rel = torch.tensor([[1, 1, -1], [0, 0, 0]])  # query 0: 2 positives; query 1: none
        >>> loss, stats = info_nce_loss(q, d, rel)
        >>> stats.rows, stats.queries_without_positive
        (2, 1)
    """
    relevance = relevance.to(q.device)
    score_fn = score_fn or dot_scores
    row_query, row_doc = expand_positive_rows(relevance, positives)
    has_pos = (relevance > 0).any(dim=1)
    stats = LossStats(rows=int(row_query.numel()), queries=int(relevance.shape[0]),
                      queries_without_positive=int((~has_pos).sum()))
    if stats.rows == 0:
        return (q.sum() + d.sum()) * 0.0, stats
    keep = row_mask(relevance, row_query, row_doc, in_batch_negatives, positives)
    numer = numerator_mask(relevance, row_query, positives)
    size = chunk_size or stats.rows
    total = q.new_zeros(())
    for start in range(0, stats.rows, size):
        sl = slice(start, start + size)
        args = (q, d, row_query[sl], row_doc[sl], keep[sl], temperature, score_fn,
                None if numer is None else numer[sl])
        if chunk_size and torch.is_grad_enabled() and (q.requires_grad or d.requires_grad):
            part = checkpoint(_rows_ce_sum, *args, use_reentrant=False)
        else:
            part = _rows_ce_sum(*args)
        total = total + part
    return total / stats.rows, stats


def info_nce_from_scores(scores: torch.Tensor, relevance: torch.Tensor, *, temperature: float = 0.02,
                         in_batch_negatives: bool = True, positives: str = "each") -> tuple[torch.Tensor, LossStats]:
    """:func:`info_nce_loss` from a precomputed score matrix ``scores`` [Q, D] (same rows, masks and mean).

    Used when the scores also serve another loss (distillation), so MaxSim is computed once.
    """
    relevance = relevance.to(scores.device)
    row_query, row_doc = expand_positive_rows(relevance, positives)
    has_pos = (relevance > 0).any(dim=1)
    stats = LossStats(rows=int(row_query.numel()), queries=int(relevance.shape[0]),
                      queries_without_positive=int((~has_pos).sum()))
    if stats.rows == 0:
        return scores.sum() * 0.0, stats
    keep = row_mask(relevance, row_query, row_doc, in_batch_negatives, positives)
    logits = (scores[row_query] / temperature).masked_fill(~keep, float("-inf"))
    return _rows_loss_sum(logits, row_doc, numerator_mask(relevance, row_query, positives)) / stats.rows, stats


def _rows_ce_sum(q, d, row_query, row_doc, keep, temperature, score_fn, numer=None) -> torch.Tensor:
    """Sum of the losses of some rows: scores [n, D] / T, masked candidates at -inf."""
    scores = score_fn(q[row_query], d, rows=row_query)
    if scores.dtype in (torch.float16, torch.bfloat16):  # softmax in fp32 under autocast
        scores = scores.float()
    logits = (scores / temperature).masked_fill(~keep, float("-inf"))
    return _rows_loss_sum(logits, row_doc, numer)


def _rows_loss_sum(logits: torch.Tensor, row_doc: torch.Tensor, numer: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy to ``row_doc`` summed over rows; with ``numer`` [n, D] (``any``) the row's loss is
    logsumexp(candidates) - logsumexp(numerator documents)."""
    if numer is None:
        return F.cross_entropy(logits, row_doc, reduction="sum")
    return (torch.logsumexp(logits, dim=1) - torch.logsumexp(logits.masked_fill(~numer, float("-inf")), dim=1)).sum()


def matryoshka_info_nce_loss(
    q: torch.Tensor,
    d: torch.Tensor,
    relevance: torch.Tensor,
    dims: Sequence[int],
    *,
    normalize: bool = True,
    **kwargs,
) -> tuple[torch.Tensor, LossStats]:
    """Mean of :func:`info_nce_loss` over truncations of bi-encoder embeddings to each of ``dims``.

    q [Q, dim], d [D, dim]; each truncation q[:, :m] is re-normalised when ``normalize``. Listing the full
    size among ``dims`` includes the untruncated loss. Example: dims=[384, 128] averages two losses.
    """
    losses = []
    stats = None
    for m in dims:
        qm, dm = q[..., :m], d[..., :m]
        if normalize:
            qm, dm = F.normalize(qm, dim=-1), F.normalize(dm, dim=-1)
        loss, stats = info_nce_loss(qm, dm, relevance, **kwargs)
        losses.append(loss)
    return torch.stack(losses).mean(), stats  # type: ignore[return-value]


class InfoNCELoss:
    """The training loss as configured: InfoNCE, optionally averaged over Matryoshka dimensions.

    Example:
        >>> loss_fn = InfoNCELoss(temperature=0.05, matryoshka_dims=[384, 128])
        >>> loss, stats = loss_fn(q, d, relevance)                   # bi-encoder [Q, 384], [D, 384]
        >>> loss, stats = loss_fn(Q, D, relevance, score_fn=maxsim_scorer(d_mask, q_mask))  # ColBERT
    """

    def __init__(self, temperature: float = 0.02, in_batch_negatives: bool = True, chunk_size: int | None = None,
                 matryoshka_dims: Sequence[int] = (), normalize: bool = True, positives: str = "each"):
        self.kwargs = dict(temperature=temperature, in_batch_negatives=in_batch_negatives, chunk_size=chunk_size,
                           positives=positives)
        self.matryoshka_dims = list(matryoshka_dims)
        self.normalize = normalize

    def __call__(self, q: torch.Tensor, d: torch.Tensor, relevance: torch.Tensor,
                 score_fn: ScoreFn | None = None) -> tuple[torch.Tensor, LossStats]:
        if self.matryoshka_dims and score_fn is None:
            return matryoshka_info_nce_loss(q, d, relevance, self.matryoshka_dims, normalize=self.normalize,
                                            **self.kwargs)
        return info_nce_loss(q, d, relevance, score_fn=score_fn, **self.kwargs)
