"""Knowledge distillation: KL divergence between the teacher's and the student's softmax over each
query's documents (the loss ColBERTv2 was trained with; PyLate's ``Distillation``).

For query ``i`` with candidate documents ``C_i``::

    p_t = softmax(teacher[i, C_i] / teacher_temperature)
    p_s = softmax(student[i, C_i] / student_temperature)
    loss_i = KL(p_t || p_s) = sum_j p_t[j] * (log p_t[j] - log p_s[j])

and the loss is the mean of ``loss_i`` over the queries with at least two candidates (a softmax over one
document is constant). Candidates: the documents labelled for the query (relevance != 0), plus, with
``in_batch_negatives``, every other document of the batch; pairs without a teacher score (NaN) are left
out. Computed in the scores' dtype (float64 in the gradcheck test).

Inputs and shapes:
    student: [Q, D] the student's scores (dot products or MaxSim), differentiable.
    teacher: [Q, D] float, the teacher's scores from relations.parquet's TEACHER_SCORE (NaN = unscored).
    relevance: [Q, D] integer labels (>0 positive, <0 negative, 0 unknown).

Example:
    >>> student = torch.tensor([[2.0, 1.0, 0.0]], requires_grad=True)
    >>> teacher = torch.tensor([[3.0, 1.0, 2.0]])
    >>> loss, n = distill_loss(student, teacher, torch.tensor([[1, -1, -1]]))
    >>> n
    1
"""

from __future__ import annotations

import torch


def distill_candidates(relevance: torch.Tensor, teacher: torch.Tensor, in_batch_negatives: bool) -> torch.Tensor:
    """Bool [Q, D]: the documents each query's two softmaxes run over (module docstring)."""
    keep = (relevance != 0) | in_batch_negatives
    if not isinstance(keep, torch.Tensor):
        keep = torch.full(relevance.shape, bool(keep), device=relevance.device)
    return keep & ~torch.isnan(teacher)


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, relevance: torch.Tensor, *,
                 student_temperature: float = 1.0, teacher_temperature: float = 1.0,
                 in_batch_negatives: bool = False) -> tuple[torch.Tensor, int]:
    """(mean KL(teacher || student) over queries, number of queries it averages); see the module docstring.

    With no query having two candidates the loss is 0 with a graph (backward works) and the count is 0.
    """
    teacher = teacher.to(device=student.device, dtype=student.dtype)
    keep = distill_candidates(relevance.to(student.device), teacher, in_batch_negatives)
    rows = keep.sum(dim=1) >= 2
    n = int(rows.sum())
    if n == 0:
        return student.sum() * 0.0, 0
    keep, s, t = keep[rows], student[rows], teacher[rows]
    log_ps = torch.log_softmax((s / student_temperature).masked_fill(~keep, float("-inf")), dim=1)
    log_pt = torch.log_softmax((t.nan_to_num(0.0) / teacher_temperature).masked_fill(~keep, float("-inf")), dim=1)
    # left-out documents have p_t = 0 and -inf logs: zero them before the product (no 0 * inf = nan)
    log_ps = torch.where(keep, log_ps, torch.zeros_like(log_ps))
    log_pt = torch.where(keep, log_pt, torch.zeros_like(log_pt))
    kl = (log_pt.exp() * keep * (log_pt - log_ps)).sum(dim=1)
    return kl.sum() / n, n
