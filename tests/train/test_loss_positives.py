"""train.positives: `first` and `any` rows against a plain-loop reference, gradcheck, the scores path, the config."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from embedctl.config import load_config
from embedctl.errors import EmbedctlError
from embedctl.train.losses.infonce import info_nce_from_scores, info_nce_loss


def reference_loss(q, d, rel, temperature, in_batch_negatives, positives):
    """Plain Python loop, one row per query with a positive: `first` scores its first positive against its
    negatives (other positives masked); `any` puts all its positives in the numerator and the candidates."""
    total, rows = 0.0, 0
    for i in range(rel.shape[0]):
        pos = [j for j in range(rel.shape[1]) if rel[i, j] > 0]
        if not pos:
            continue
        numer = pos if positives == "any" else pos[:1]
        cands = numer + [k for k in range(rel.shape[1]) if rel[i, k] < 0 or (in_batch_negatives and rel[i, k] == 0)]
        logits = torch.stack([q[i] @ d[k] for k in range(rel.shape[1])]) / temperature
        total = total - (torch.logsumexp(logits[numer], 0) - torch.logsumexp(logits[cands], 0))
        rows += 1
    return total / rows


def case(seed: int, nq: int = 6, nd: int = 9, dim: int = 5):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(nq, dim, generator=g, dtype=torch.float64), dim=-1)
    d = F.normalize(torch.randn(nd, dim, generator=g, dtype=torch.float64), dim=-1)
    rel = torch.randint(-1, 2, (nq, nd), generator=g).to(torch.int8)
    rel[0, :3] = 1  # query 0: three positives
    rel[1] = -1  # query 1: none
    return q, d, rel


@pytest.mark.parametrize("positives", ["first", "any"])
@pytest.mark.parametrize("in_batch_negatives", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_plain_loop_reference(positives, in_batch_negatives, seed):
    q, d, rel = case(seed)
    loss, stats = info_nce_loss(q, d, rel, temperature=0.1, in_batch_negatives=in_batch_negatives,
                                positives=positives)
    expected = reference_loss(q, d, rel, 0.1, in_batch_negatives, positives)
    assert stats.rows == int((rel > 0).any(dim=1).sum()) and stats.queries_without_positive >= 1
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    chunked, _ = info_nce_loss(q, d, rel, temperature=0.1, in_batch_negatives=in_batch_negatives,
                               positives=positives, chunk_size=2)
    assert chunked.item() == pytest.approx(loss.item(), rel=1e-12)
    from_scores, s2 = info_nce_from_scores(q @ d.T, rel, temperature=0.1, in_batch_negatives=in_batch_negatives,
                                           positives=positives)
    assert from_scores.item() == pytest.approx(loss.item(), rel=1e-12) and s2.rows == stats.rows


def test_hand_computed_any_and_first():
    """Query 0: positives d0, d1 and negative d2; `first` keeps d0 vs d2, `any` puts d0 and d1 over all three."""
    q = F.normalize(torch.randn(1, 4, dtype=torch.float64), dim=-1)
    d = F.normalize(torch.randn(3, 4, dtype=torch.float64), dim=-1)
    rel = torch.tensor([[1, 1, -1]], dtype=torch.int8)
    s = (q @ d.T)[0] / 0.05
    first, _ = info_nce_loss(q, d, rel, temperature=0.05, positives="first")
    anyp, _ = info_nce_loss(q, d, rel, temperature=0.05, positives="any")
    assert first.item() == pytest.approx(-(s[0] - torch.logsumexp(s[[0, 2]], 0)).item(), rel=1e-12)
    assert anyp.item() == pytest.approx(-(torch.logsumexp(s[:2], 0) - torch.logsumexp(s, 0)).item(), rel=1e-12)


def test_single_positive_queries_give_the_same_loss_in_every_mode():
    q, d, _ = case(3)
    rel = torch.full((6, 9), -1, dtype=torch.int8)
    rel[torch.arange(6), torch.arange(6)] = 1
    losses = [info_nce_loss(q, d, rel, temperature=0.1, positives=p)[0].item() for p in ("each", "first", "any")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-12) and losses[0] == pytest.approx(losses[2], rel=1e-12)


@pytest.mark.parametrize("positives", ["first", "any"])
def test_gradcheck(positives):
    q, d, rel = case(4, nq=3, nd=5, dim=4)
    q, d = q.clone().requires_grad_(), d.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: info_nce_loss(a, b, rel, temperature=0.2, positives=positives)[0], (q, d))


def test_config_key_refuses_an_unknown_mode():
    assert load_config("configs/colbert_scifact.yaml", ["train.positives=any"]).cfg.train.positives == "any"
    with pytest.raises(EmbedctlError) as err:
        load_config("configs/colbert_scifact.yaml", ["train.positives=all"])
    assert "train.positives" in str(err.value) and "first" in str(err.value)
