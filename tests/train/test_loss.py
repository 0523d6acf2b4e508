"""InfoNCE over a relevance matrix: Arctic's multi-positive defect, gradcheck, plain-loop reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from embedctl.train.losses.infonce import InfoNCELoss, info_nce_loss, matryoshka_info_nce_loss


def reference_loss(q, d, rel, temperature, in_batch_negatives):
    """Plain Python loop: one row per (query, positive); other positives and unknowns masked."""
    total, rows = 0.0, 0
    for i in range(rel.shape[0]):
        for j in range(rel.shape[1]):
            if rel[i, j] <= 0:
                continue
            cands = [k for k in range(rel.shape[1])
                     if k == j or rel[i, k] < 0 or (in_batch_negatives and rel[i, k] == 0)]
            logits = torch.stack([q[i] @ d[k] for k in cands]) / temperature
            total = total - torch.log_softmax(logits, 0)[cands.index(j)]
            rows += 1
    return total / rows


def random_case(seed, nq=5, nd=7, dim=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(nq, dim, generator=g, dtype=dtype), dim=-1)
    d = F.normalize(torch.randn(nd, dim, generator=g, dtype=dtype), dim=-1)
    rel = torch.randint(-1, 2, (nq, nd), generator=g).to(torch.int8)
    rel[0, 0] = 1  # at least one positive
    return q, d, rel


def test_arctic_failure_case_two_positives_and_one_query_without():
    """Query 0 has 2 positives, query 1 none: 2 rows for query 0, query 1 counted and skipped."""
    q = F.normalize(torch.randn(2, 8, dtype=torch.float64), dim=-1).requires_grad_()
    d = F.normalize(torch.randn(3, 8, dtype=torch.float64), dim=-1)
    rel = torch.tensor([[1, 1, -1], [-1, -1, 0]], dtype=torch.int8)
    loss, stats = info_nce_loss(q, d, rel, temperature=0.05, in_batch_negatives=False)
    assert (stats.rows, stats.queries, stats.queries_without_positive) == (2, 2, 1)
    s = (q @ d.T).detach() / 0.05
    # row (q0, d0): candidates d0 and d2 (d1, the other positive, is masked); row (q0, d1): d1 and d2
    expected = -(s[0, 0] - torch.logsumexp(s[0, [0, 2]], 0)) - (s[0, 1] - torch.logsumexp(s[0, [1, 2]], 0))
    assert loss.item() == pytest.approx(expected.item() / 2, rel=1e-12)
    loss.backward()
    assert torch.all(q.grad[1] == 0), "a query without positive must not be trained toward any document"


def test_queries_without_positive_everywhere_give_zero_loss_with_graph():
    q = torch.randn(2, 4, requires_grad=True)
    d = torch.randn(3, 4)
    loss, stats = info_nce_loss(q, d, torch.tensor([[0, -1, 0], [-1, 0, 0]]))
    assert stats.rows == 0 and stats.queries_without_positive == 2 and loss.item() == 0.0
    loss.backward()


@pytest.mark.parametrize("in_batch", [True, False])
@pytest.mark.parametrize("chunk", [None, 1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_equals_plain_loop_reference(in_batch, chunk, seed):
    q, d, rel = random_case(seed)
    loss, stats = info_nce_loss(q, d, rel, temperature=0.02, in_batch_negatives=in_batch, chunk_size=chunk)
    ref = reference_loss(q, d, rel, 0.02, in_batch)
    assert stats.rows == int((rel > 0).sum())
    assert loss.item() == pytest.approx(ref.item(), rel=1e-10)


@pytest.mark.parametrize("chunk", [None, 2])
def test_gradcheck_float64(chunk):
    q, d, rel = random_case(7, nq=3, nd=4, dim=5)
    q.requires_grad_(), d.requires_grad_()

    def fn(q, d):
        return info_nce_loss(q, d, rel, temperature=0.1, chunk_size=chunk)[0]

    assert torch.autograd.gradcheck(fn, (q, d), eps=1e-6, atol=1e-5)


def test_chunked_gradients_equal_unchunked():
    q, d, rel = random_case(3, nq=6, nd=9)
    grads = []
    for chunk in (None, 2):
        qq, dd = q.clone().requires_grad_(), d.clone().requires_grad_()
        info_nce_loss(qq, dd, rel, chunk_size=chunk)[0].backward()
        grads.append((qq.grad, dd.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-12, atol=1e-12)


def test_matryoshka_is_mean_over_truncations():
    q, d, rel = random_case(1, dim=8)
    loss, _ = matryoshka_info_nce_loss(q, d, rel, [8, 4], temperature=0.05)
    parts = [reference_loss(F.normalize(q[:, :m], dim=-1), F.normalize(d[:, :m], dim=-1), rel, 0.05, True)
             for m in (8, 4)]
    assert loss.item() == pytest.approx(sum(p.item() for p in parts) / 2, rel=1e-10)
    assert InfoNCELoss(temperature=0.05, matryoshka_dims=[8, 4])(q, d, rel)[0].item() == pytest.approx(loss.item())


def test_uniform_scores_give_log_candidates():
    q, d = torch.zeros(1, 4), torch.zeros(5, 4)
    loss, _ = info_nce_loss(q, d, torch.tensor([[1, 0, 0, 0, 0]]))
    assert loss.item() == pytest.approx(math.log(5))


def test_colbert_maxsim_loss_matches_reference():
    pytest.importorskip("embedctl.models.encoder", reason="models branch (colbert_scores) not merged yet")
    from embedctl.train.losses.infonce import maxsim_scorer

    g = torch.Generator().manual_seed(0)
    Q = F.normalize(torch.randn(3, 4, 6, generator=g, dtype=torch.float64), dim=-1)
    D = F.normalize(torch.randn(5, 7, 6, generator=g, dtype=torch.float64), dim=-1)
    d_mask = torch.rand(5, 7, generator=g) > 0.3
    d_mask[:, 0] = True
    q_mask = torch.ones(3, 4, dtype=torch.bool)
    q_mask[1, 3] = False
    rel = torch.tensor([[1, 0, -1, 0, 1], [0, 1, 0, 0, 0], [-1, -1, -1, -1, -1]])
    loss, stats = info_nce_loss(Q, D, rel, temperature=0.1, score_fn=maxsim_scorer(d_mask, q_mask), chunk_size=2)
    scores = torch.zeros(3, 5, dtype=torch.float64)
    for i in range(3):
        for j in range(5):
            sim = (Q[i] * q_mask[i, :, None]) @ D[j][d_mask[j]].T
            scores[i, j] = sim.max(dim=1).values.sum()
    ref = reference_loss(torch.eye(3, dtype=torch.float64), scores.T.contiguous(), rel, 0.1, True)
    assert stats.queries_without_positive == 1
    assert loss.item() == pytest.approx(ref.item(), rel=1e-9)
