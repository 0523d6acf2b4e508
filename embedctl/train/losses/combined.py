"""The training loss as configured by ``train.loss``: ``infonce``, ``distill`` or ``infonce+distill``.

``infonce`` is :class:`embedctl.train.losses.infonce.InfoNCELoss` unchanged. With distillation the
student's score matrix ``S`` [Q, D] of the (global) batch is computed once; InfoNCE takes its rows from
``S`` and the distillation loss (:mod:`embedctl.train.losses.distill`) compares ``S`` with the teacher's
scores. ``infonce+distill`` = InfoNCE + ``distill_weight`` x KL.

Inputs: q [Q, dim] or ColBERT [Q, Lq, dim]; d [D, dim] or [D, Ld, dim]; relevance [Q, D]; teacher [Q, D]
float (NaN = unscored) or None; ``score_fn`` as for InfoNCE (MaxSim for ColBERT, default dot products).

Example:
    >>> loss_fn = TrainingLoss("infonce+distill", InfoNCELoss(temperature=0.05), distill_weight=1.0)
    >>> loss, stats = loss_fn(q, d, relevance, teacher=teacher_scores)
    >>> stats.parts    # {"infonce": ..., "distill": ...}
"""

from __future__ import annotations

import torch

from embedctl.errors import EmbedctlError
from embedctl.train.losses.distill import distill_loss
from embedctl.train.losses.infonce import InfoNCELoss, LossStats, ScoreFn, dot_scores, info_nce_from_scores

LOSSES = ("infonce", "distill", "infonce+distill")


class TrainingLoss:
    """``train.loss`` over the global batch; ``__call__`` returns (scalar loss, LossStats)."""

    def __init__(self, kind: str, infonce: InfoNCELoss, *, distill_weight: float = 1.0,
                 student_temperature: float = 1.0, teacher_temperature: float = 1.0):
        if kind not in LOSSES:
            raise ValueError(f"train.loss must be one of {LOSSES}, got {kind!r}")
        self.kind, self.infonce, self.distill_weight = kind, infonce, distill_weight
        self.student_temperature, self.teacher_temperature = student_temperature, teacher_temperature

    @property
    def needs_teacher(self) -> bool:
        return self.kind != "infonce"

    def __call__(self, q: torch.Tensor, d: torch.Tensor, relevance: torch.Tensor, score_fn: ScoreFn | None = None,
                 teacher: torch.Tensor | None = None) -> tuple[torch.Tensor, LossStats]:
        if not self.needs_teacher:
            return self.infonce(q, d, relevance, score_fn=score_fn)
        if teacher is None:
            raise EmbedctlError(f"train.loss={self.kind} needs teacher scores, and this batch has none",
                                hint="rebuild the batches with prebatch.teacher=MODEL, or set train.loss=infonce")
        relevance = relevance.to(q.device)
        scores = (score_fn or dot_scores)(q, d)
        if scores.dtype in (torch.float16, torch.bfloat16):
            scores = scores.float()
        kl, n = distill_loss(scores, teacher, relevance, student_temperature=self.student_temperature,
                             teacher_temperature=self.teacher_temperature,
                             in_batch_negatives=self.infonce.kwargs["in_batch_negatives"])
        if self.kind == "distill":
            # rows: queries distilled; a query without a positive still learns from the teacher
            return kl, LossStats(rows=n, queries=int(relevance.shape[0]), queries_without_positive=0,
                                 parts={"distill": float(kl.detach())})
        nce, stats = info_nce_from_scores(scores, relevance, temperature=self.infonce.kwargs["temperature"],
                                          in_batch_negatives=self.infonce.kwargs["in_batch_negatives"],
                                          positives=self.infonce.kwargs["positives"])
        stats.parts = {"infonce": float(nce.detach()), "distill": float(kl.detach())}
        return nce + self.distill_weight * kl, stats
